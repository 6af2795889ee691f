# The pact image: the three static binaries and nothing else. Built FROM
# scratch so nothing is pulled from a registry: `make image` builds the
# binaries (CGO_ENABLED=0) and then this.
# The binaries carry their version (make build stamps it from git); the
# label repeats it for registries and `docker inspect`.
FROM scratch
ARG VERSION=devel
LABEL org.opencontainers.image.title="pact" org.opencontainers.image.version="${VERSION}"
COPY bin/pact-journal bin/pact-agent bin/pact /
ENTRYPOINT ["/pact-journal"]

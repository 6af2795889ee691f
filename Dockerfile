# The pact image: the three static binaries and nothing else. Built FROM
# scratch so nothing is pulled from a registry: `make image` builds the
# binaries (CGO_ENABLED=0) and then this.
FROM scratch
COPY bin/pact-journal bin/pact-agent bin/pact /
ENTRYPOINT ["/pact-journal"]

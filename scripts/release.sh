#!/usr/bin/env bash
# make release VERSION=x.y.z: cut pact release x.y.z from the commit checked
# out (docs/releases.md). Refuses a version that is not semver, a tree that
# is not clean, a version RELEASES records at another commit, and a final
# release CHANGELOG.md has no entry for. Writes into OUT (default
# bin/release/x.y.z/):
#
#   pact-journal_x.y.z_linux_amd64, pact-agent_..., pact_...   static binaries (-s -w)
#   pact_x.y.z-1_amd64.deb, pact-x.y.z-1.x86_64.rpm            make package (the same binaries)
#   pact-image_x.y.z_linux_amd64.tar.gz                        docker save of the FROM-scratch image
#   *.cdx.json                                                 a CycloneDX SBOM per binary (cyclonedx-gomod bin)
#   release-notes.md                                           the version's CHANGELOG.md section
#   SHA256SUMS                                                 of every file above
#
# Every binary prints vx.y.z and the commit for --version; the packages are
# version x.y.z (a pre-release's '-' becomes '~': 0.2.0~rc.1 sorts before
# 0.2.0); the image is tagged and labelled vx.y.z. The script checks each of
# these before it writes SHA256SUMS.
#
#   release.sh VERSION          the release
#   release.sh --plan VERSION   print the versions and files it would make; build nothing
#
# GO, DOCKER and CYCLONEDX_GOMOD name the tools (make release passes its
# pinned cyclonedx-gomod from .tools/; make package installs nfpm there);
# OUT is the output directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# The release sets every variable the Makefile needs; a make calling this
# script must not pass its own command line down (BIN=, PKG_DIR=, ...).
unset MAKEFLAGS MFLAGS MAKELEVEL

GO=${GO:-go}
DOCKER=${DOCKER:-docker}
CYCLONEDX_GOMOD=${CYCLONEDX_GOMOD:-.tools/cyclonedx-gomod}

die() { # die CODE MESSAGE...: exit 2 is a refusal (nothing was built), 1 a failure
	local code=$1
	shift
	printf 'release: %s\n' "$@" >&2
	exit "$code"
}

plan=false
if [ "${1:-}" = --plan ]; then
	plan=true
	shift
fi
[ $# -eq 1 ] || die 2 "usage: make release VERSION=x.y.z   (or scripts/release.sh [--plan] x.y.z)"
version=$1

# Semantic versioning 2.0.0 (semver.org): MAJOR.MINOR.PATCH, numbers without
# leading zeros, an optional pre-release (-rc.1). Build metadata (+...) is
# refused: an image tag cannot carry a '+', and a release needs none.
num='(0|[1-9][0-9]*)'
ident='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
semver="^$num\\.$num\\.$num(-$ident(\\.$ident)*)?\$"
if ! [[ $version =~ $semver ]]; then
	hint="write it as MAJOR.MINOR.PATCH, e.g. make release VERSION=0.2.0 (a pre-release: VERSION=0.2.0-rc.1)"
	if [ -z "$version" ]; then
		hint="give the version to release: make release VERSION=0.2.0 (a pre-release: VERSION=0.2.0-rc.1)"
	elif [[ $version == v* ]] && [[ ${version#v} =~ $semver ]]; then
		hint="write it without the v: make release VERSION=${version#v} (the binaries print v${version#v}, the git tag is v${version#v})"
	elif [[ $version == *+* ]] && [[ ${version%%+*} =~ $semver ]]; then
		hint="build metadata (+...) is not allowed in a release: make release VERSION=${version%%+*}"
	elif [[ $version =~ ^[0-9a-f]{7,40}(-dirty)?$ ]] || [[ $version == *-g[0-9a-f]* ]]; then
		hint="that is a git commit, not a release: give the version, e.g. make release VERSION=0.2.0"
	fi
	die 2 "'$version' is not a semantic version (semver.org): $hint"
fi
tag=v$version
prerelease=false
[[ $version == *-* ]] && prerelease=true

commit=$(git rev-parse --verify HEAD 2>/dev/null) || die 2 "not a git checkout: a release is cut from a commit of the pact repository"
# The Makefile is the one place that turns a version into the binaries'
# stamp and the packages' version.
versions=$(make -s --no-print-directory print-version VERSION="$tag" COMMIT="$commit") || die 1 "make print-version failed"
read -r stamp pkg_version <<<"$versions"
goos=$($GO env GOOS)
goarch=$($GO env GOARCH)
out=${OUT:-bin/release/$version}
suffix="${version}_${goos}_${goarch}"
image="pact:$tag"
image_tar="pact-image_${suffix}.tar.gz"

if $plan; then
	cat <<EOF
version         $version (git tag $tag)
commit          $commit
binaries print  $stamp
packages        $pkg_version-1
image           $image (label org.opencontainers.image.version=$stamp), saved as $image_tar
directory       $out
binaries        pact-journal_$suffix pact-agent_$suffix pact_$suffix
EOF
	exit 0
fi

# A release is built from a commit, and only from it: nothing modified,
# nothing untracked that a build could pick up.
dirty=$(git status --porcelain --untracked-files=normal)
if [ -n "$dirty" ]; then
	{
		echo "release: the tree is not clean; a release is built from a commit and nothing else:"
		printf '%s\n' "$dirty" | head -n 20 | sed 's/^/  /'
		[ "$(printf '%s\n' "$dirty" | wc -l)" -le 20 ] || echo "  ..."
		echo "Commit or remove these, or cut the release from a clean worktree of the commit:"
		echo "  git worktree add /tmp/pact-$version ${commit:0:12} && make -C /tmp/pact-$version release VERSION=$version"
	} >&2
	exit 2
fi

# RELEASES: "VERSION COMMIT" lines. A version is released once.
if [ -f RELEASES ]; then
	recorded=$(awk -v v="$version" '$1 == v { print $2 }' RELEASES)
	if [ -n "$recorded" ] && [ "$recorded" != "$commit" ]; then
		die 2 "$version was released from ${recorded:0:12} (RELEASES); this is ${commit:0:12}. A version is released once: choose the next one (docs/releases.md)"
	fi
fi

# The notes: the version's CHANGELOG.md section ("## x.y.z (date)"). A
# final release needs one; a pre-release without its own takes Unreleased.
section() { # section HEADING-REGEX: the lines of that section, heading included
	awk -v re="$1" '/^## / { if (on) exit; if ($0 ~ re) on = 1 } on' CHANGELOG.md
}
vre=${version//./\\.}
notes=""
[ -f CHANGELOG.md ] && notes=$(section "^## \\[?$vre\\]?( |\$)")
if [ -z "$notes" ]; then
	$prerelease || die 2 "CHANGELOG.md has no entry for $version: rename its '## Unreleased' section to '## $version ($(date -u +%Y-%m-%d))' (with its 'Upgrading from the previous release' notes), commit, and run make release VERSION=$version again (docs/releases.md)"
	notes=$(section '^## Unreleased')
	echo "release: CHANGELOG.md has no $version section: the pre-release's notes are its Unreleased section"
fi

[ -e "$out" ] && die 2 "$out exists: remove it to build $version again (rm -rf $out)"
command -v "$DOCKER" >/dev/null || die 2 "the image needs docker (DOCKER=$DOCKER not found)"
[ -x "$CYCLONEDX_GOMOD" ] || die 2 "$CYCLONEDX_GOMOD is missing: run make release VERSION=$version (it installs the pinned tools into .tools/)"

stage=$out.partial
rm -rf "$stage"
mkdir -p "$stage"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== pact $version from $commit into $out"

# The binaries and the packages: make package builds the stripped, stamped
# binaries into PKG_BIN and packs those very files.
echo "== binaries and packages (make package)"
make -s --no-print-directory package VERSION="$tag" COMMIT="$commit" PKG_ARCH="$goarch" \
	PKG_DIR="$work/pkg" PKG_BIN="$work/pkg/bin" BIN="$work/bin" >/dev/null
for b in pact-journal pact-agent pact; do
	cp "$work/pkg/bin/$b" "$stage/${b}_$suffix"
done
mv "$work"/pkg/*.deb "$work"/pkg/*.rpm "$stage/"

# The image, built FROM scratch (nothing pulled) around the same binaries.
echo "== image $image"
mkdir -p "$work/image/bin"
cp "$work"/pkg/bin/pact-journal "$work"/pkg/bin/pact-agent "$work"/pkg/bin/pact "$work/image/bin/"
"$DOCKER" build -q --build-arg VERSION="$stamp" -t "$image" -f Dockerfile "$work/image" >/dev/null
"$DOCKER" save "$image" | gzip -n >"$stage/$image_tar"

# A software bill of materials per binary: the modules linked into it, as
# its build information records them (go version -m), in CycloneDX JSON.
echo "== SBOMs (cyclonedx-gomod $("$CYCLONEDX_GOMOD" version 2>/dev/null | awk '/^Version:/ { print $2 }'))"
for b in pact-journal pact-agent pact; do
	"$CYCLONEDX_GOMOD" bin -json -version "$tag" -output "$stage/${b}_$suffix.cdx.json" "$stage/${b}_$suffix" 2>"$work/sbom.log" ||
		{ cat "$work/sbom.log" >&2; die 1 "cyclonedx-gomod failed on $b"; }
done

printf '%s\n' "$notes" >"$stage/release-notes.md"

# Every artifact says the same version before it is summed.
echo "== checking the version of every artifact"
fail() { die 1 "$@" "the release is left incomplete in $stage"; }
for b in pact-journal pact-agent pact; do
	got=$("$stage/${b}_$suffix" --version)
	case $got in "$b $stamp (commit ${commit:0:12}, "*) ;; *) fail "${b}_$suffix --version printed '$got', want '$b $stamp (commit ${commit:0:12}, ...)'" ;; esac
done
deb=$(cd "$stage" && ls ./*.deb)
rpm=$(cd "$stage" && ls ./*.rpm)
if command -v dpkg-deb >/dev/null; then
	got=$(dpkg-deb -f "$stage/$deb" Version)
	[ "$got" = "$pkg_version-1" ] || fail "$deb has version $got, want $pkg_version-1"
else
	echo "release: dpkg-deb is not installed: $deb's version is not checked"
fi
if command -v rpm >/dev/null; then
	got=$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$stage/$rpm" 2>/dev/null)
	[ "$got" = "$pkg_version-1" ] || fail "$rpm has version $got, want $pkg_version-1"
else
	echo "release: rpm is not installed: $rpm's version is not checked (apt-get install rpm)"
fi
got=$("$DOCKER" image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")
[ "$got" = "$stamp" ] || fail "$image is labelled $got, want $stamp"
got=$("$DOCKER" run --rm --network none "$image" --version)
case $got in "pact-journal $stamp (commit ${commit:0:12}, "*) ;; *) fail "$image's pact-journal --version printed '$got'" ;; esac

(cd "$stage" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
mv "$stage" "$out"

echo "== pact $version is in $out:"
(cd "$out" && ls -l --time-style=+ | awk 'NR > 1 { printf "  %10s  %s\n", $5, $NF }')
cat <<EOF
Check it anywhere with: (cd $out && sha256sum -c SHA256SUMS)
Then record it: add the line "$version $commit" to RELEASES, commit, and tag the release:
  git tag -a $tag ${commit:0:12} -m "pact $version"
EOF

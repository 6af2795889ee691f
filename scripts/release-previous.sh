#!/usr/bin/env bash
# make release-previous [PREVIOUS=x.y.z]: build a release that RELEASES
# records from its commit in this repository's history, for upgrade tests
# (docs/releases.md). By default the newest release whose commit is not the
# one checked out: the release a site upgrades from.
#
# The commit is checked out with `git worktree add` into a temporary
# directory and built there with that release's own `make build`, stamped
# vx.y.z and its commit as the release was, into
# .cache/releases/x.y.z/bin/ (CACHE overrides .cache/releases). A second
# run finds the binaries there and builds nothing. The last line printed is
# the bin directory.
#
# Nothing is fetched from a git remote: a clone without the commit (a
# shallow clone) is told how to get it and the script exits 2. Go modules
# come from the module cache or the Go module proxy, as for any build.
set -euo pipefail
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL
GO=${GO:-go}
CACHE=${CACHE:-.cache/releases}
# Build with this toolchain: never let an old go.mod download another.
export GOTOOLCHAIN=local

die() {
	local code=$1
	shift
	printf 'release-previous: %s\n' "$@" >&2
	exit "$code"
}

[ -f RELEASES ] || die 2 "no RELEASES file: nothing has been released yet"
# RELEASES: "VERSION COMMIT" lines, oldest first; # starts a comment.
releases=$(awk '!/^#/ && NF >= 2 { print $1, $2 }' RELEASES)
[ -n "$releases" ] || die 2 "RELEASES records no release"
head=$(git rev-parse --verify HEAD 2>/dev/null) || die 2 "not a git checkout: the releases are built from this repository's history"

if [ $# -ge 1 ] && [ -n "$1" ]; then
	version=$1
	commit=$(awk -v v="$version" '$1 == v { print $2 }' <<<"$releases")
	[ -n "$commit" ] || die 2 "RELEASES records no release $version; it records: $(awk '{ printf "%s ", $1 }' <<<"$releases")"
else
	line=$(awk -v h="$head" '$2 != h' <<<"$releases" | tail -n 1)
	version=${line%% *} commit=${line#* }
	[ -n "$line" ] || die 2 "the only release RELEASES records is the commit checked out: there is no previous release"
fi

if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
	if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
		die 2 "release $version's commit $commit is not in this clone: it is shallow (git rev-parse --is-shallow-repository)." \
			"Get the history from where you cloned (git fetch --unshallow), or clone without --depth; this script fetches nothing."
	fi
	die 2 "release $version's commit $commit (RELEASES) is not in this repository's history: RELEASES is wrong, or the history was rewritten"
fi

dest=$CACHE/$version/bin
mkdir -p "$CACHE/$version"
dest=$(cd "$CACHE/$version" && pwd)/bin
want="v$version (commit ${commit:0:12}, "
stamped() { # the three binaries in $dest print this release's version
	local b got
	for b in pact-journal pact-agent pact; do
		[ -x "$dest/$b" ] || return 1
		got=$("$dest/$b" --version 2>/dev/null) || return 1
		case $got in "$b $want"*) ;; *) return 1 ;; esac
	done
}
if stamped; then
	echo "release-previous: pact $version is already built"
	echo "$dest"
	exit 0
fi

src=$(mktemp -d "${TMPDIR:-/tmp}/pact-$version.XXXXXX")
cleanup() {
	git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
	git worktree prune
}
trap cleanup EXIT
echo "release-previous: building pact $version from ${commit:0:12} (git worktree in $src)"
git worktree add --quiet --detach "$src" "$commit"
rm -rf "$dest"
# The release's own Makefile: its build target, its flags.
make -s --no-print-directory -C "$src" build GO="$GO" BIN="$dest" VERSION="v$version" COMMIT="$commit" >/dev/null
stamped || die 1 "the binaries built in $dest do not print pact $version's version ($want...)"
echo "release-previous: pact $version is in $dest"
echo "$dest"

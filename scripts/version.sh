#!/usr/bin/env bash
# The version make build stamps when none is given (docs/releases.md):
# `git describe --tags --always --dirty`, and where no release tag is in
# the clone (a submission or a mirror may carry none), the same from the
# newest release RELEASES records whose commit is in HEAD's history:
# v0.1.0 on its commit, v0.1.0-5-gabc1234 five commits later, -dirty with
# uncommitted changes, as git describe would say it with the tag. Outside a
# git checkout: devel.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
d=$(git describe --tags --always --dirty 2>/dev/null) || { echo devel; exit 0; }
case $d in v[0-9]*) echo "$d"; exit 0 ;; esac
dirty=""
case $d in *-dirty) dirty=-dirty ;; esac
if [ -f RELEASES ]; then
	# Newest first: the first release whose commit HEAD contains.
	while read -r version commit; do
		if git merge-base --is-ancestor "$commit" HEAD 2>/dev/null; then
			n=$(git rev-list --count "$commit..HEAD")
			if [ "$n" = 0 ]; then
				echo "v$version$dirty"
			else
				echo "v$version-$n-g$(git rev-parse --short HEAD)$dirty"
			fi
			exit 0
		fi
	done < <(awk '!/^#/ && NF >= 2 { print $1, $2 }' RELEASES | tac)
fi
echo "$d"

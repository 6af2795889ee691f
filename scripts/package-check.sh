#!/usr/bin/env bash
# make package-check: install the .deb into a fresh Debian root built with
# mmdebstrap from Debian's own packages (no container image), run the
# installed binaries' --version and check the installed units, then remove
# and purge the package and check nothing of it is left. Needs root (for
# chroot) or mmdebstrap's unshare mode, and network access to the Debian
# mirror. SUITE and MIRROR may be overridden.
set -euo pipefail
deb=${1:?usage: package-check.sh PACKAGE.deb}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
command -v mmdebstrap >/dev/null || { echo "package-check: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "package-check: run as root (it chroots into the new Debian root)" >&2; exit 2; }

root=$(mktemp -d /tmp/pi16-pkgcheck.XXXXXX)
cleanup() {
	for m in proc; do umount "$root/$m" 2>/dev/null || true; done
	rm -rf "$root"
}
trap cleanup EXIT

echo "== building a $suite root with systemd and procps (the package's dependency) in $root (mmdebstrap, $mirror)"
mmdebstrap --quiet --variant=minbase --include=systemd,procps "$suite" "$root" "$mirror"
in_root() { chroot "$root" "$@"; }

echo "== dpkg -i $(basename "$deb")"
cp "$deb" "$root/tmp/pact.deb"
in_root dpkg -i /tmp/pact.deb
for b in pact-journal pact-agent pact; do
	printf '%s --version: ' "$b"
	in_root "/usr/bin/$b" --version
done
echo "== the installed example configuration files, through the installed binaries"
in_root /usr/bin/pact-journal --config /etc/pact/journal.yaml --check-config
in_root /usr/bin/pact-agent --config /etc/pact/agent.yaml --check-config
in_root getent passwd pact >/dev/null || { echo "package-check: postinst did not create user pact" >&2; exit 1; }
echo "user pact: $(in_root getent passwd pact)"
echo "== systemd-analyze verify (the installed units, the installed binaries)"
mount -t proc proc "$root/proc"
out=$(in_root systemd-analyze verify /usr/lib/systemd/system/pact-journal.service /usr/lib/systemd/system/pact-agent.service 2>&1 || true)
umount "$root/proc"
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "ok"

echo "== dpkg -r pact, then dpkg -P pact"
in_root dpkg -r pact
for f in /usr/bin/pact-journal /usr/bin/pact-agent /usr/bin/pact /usr/lib/systemd/system/pact-agent.service; do
	if [ -e "$root$f" ]; then echo "package-check: $f left after removal" >&2; exit 1; fi
done
for f in journal.env agent.env journal.yaml agent.yaml; do
	[ -e "$root/etc/pact/$f" ] || { echo "package-check: remove (not purge) must keep /etc/pact/$f" >&2; exit 1; }
done
in_root dpkg -P pact
for f in journal.env agent.env journal.yaml agent.yaml; do
	if [ -e "$root/etc/pact/$f" ]; then echo "package-check: purge left /etc/pact/$f" >&2; exit 1; fi
done
if in_root dpkg -s pact >/dev/null 2>&1; then echo "package-check: dpkg still knows pact" >&2; exit 1; fi
echo "package-check: ok: installed, --version ran, units verified, removed and purged cleanly"

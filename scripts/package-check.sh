#!/usr/bin/env bash
# make package-check: install the .deb into a fresh Debian root built with
# mmdebstrap from Debian's own packages (no container image), run the
# installed binaries' --version, --check-config the installed example
# files (the journal's fails until a root is installed, then passes as
# user pact) and check the installed units, then remove
# and purge the package and check nothing of it is left. Needs root (for
# chroot) or mmdebstrap's unshare mode, and network access to the Debian
# mirror. SUITE and MIRROR may be overridden.
#
#   package-check.sh --install-tools   installs mmdebstrap if it is missing
#                                      (apt-get, as root), or says how
#   package-check.sh PACKAGE.deb       the check itself
set -euo pipefail
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}

install_tools() {
	command -v mmdebstrap >/dev/null && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "== installing mmdebstrap (apt-get)"
		apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
		return 0
	fi
	echo "package-check: needs mmdebstrap and root. Install it with" >&2
	echo "  sudo apt-get install mmdebstrap     (Debian, Ubuntu)" >&2
	echo "  sudo dnf install mmdebstrap         (Fedora)" >&2
	echo "then run: sudo make package-check" >&2
	exit 2
}
if [ "${1:-}" = --install-tools ]; then
	install_tools
	exit 0
fi
deb=${1:?usage: package-check.sh --install-tools | PACKAGE.deb}
install_tools
[ "$(id -u)" = 0 ] || { echo "package-check: run as root (it chroots into the new Debian root): sudo make package-check" >&2; exit 2; }

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
in_root getent passwd pact >/dev/null || { echo "package-check: postinst did not create user pact" >&2; exit 1; }
echo "user pact: $(in_root getent passwd pact)"
echo "== the installed example configuration files, through the installed binaries"
# Before a root is installed, the journal's file must not check out: the
# journal could not start with it (exit 2, naming the missing root and how
# the ceremony makes it).
if out=$(in_root /usr/bin/pact-journal --config /etc/pact/journal.yaml --check-config 2>&1); then
	echo "package-check: --check-config called journal.yaml valid without /etc/pact/ca.pem:" >&2; echo "$out" >&2; exit 1
fi
case $out in *"/etc/pact/ca.pem does not exist"*"pact ca init"*) ;; *) echo "package-check: unexpected --check-config answer without a root:" >&2; echo "$out" >&2; exit 1 ;; esac
echo "without a root, as expected: $out"
# The root and the journal CA installed as journal.yaml's comment says
# (the ceremony's root in /tmp/root-ca standing for the offline machine),
# the data directory as the unit's StateDirectory makes it; checked as the
# journal's user. The Debian root has no TPM: the key in a file, the
# file's other choice, through PACT_JOURNAL_CA_KEY.
key=file:/etc/pact/journal-ca-key.pem
in_root /usr/bin/pact ca init --dir /tmp/root-ca --domain package-check.example
in_root install -m 0644 /tmp/root-ca/ca.pem /etc/pact/ca.pem
in_root /usr/bin/pact-journal ca-request --journal-id j1 --key "$key" \
	--names localhost,127.0.0.1,::1,j1,j1.example.org,10.0.0.1 --out /tmp/j1.csr
in_root chown pact:pact /etc/pact/journal-ca-key.pem
in_root /usr/bin/pact ca sign-journal --dir /tmp/root-ca --csr /tmp/j1.csr --journal-id j1 \
	--names localhost,127.0.0.1,::1,j1,j1.example.org,10.0.0.1 --out /tmp/j1-ca.pem
in_root install -m 0644 /tmp/j1-ca.pem /etc/pact/journal-ca.pem
in_root install -d -o pact -g pact -m 0700 /var/lib/pact-journal
in_root runuser -u pact -- env PACT_JOURNAL_CA_KEY="$key" /usr/bin/pact-journal --config /etc/pact/journal.yaml --check-config
# The agent's file names the same /etc/pact/ca.pem: valid with it, and
# not without it (the agent's start reads it, and would exit 2).
in_root /usr/bin/pact-agent --config /etc/pact/agent.yaml --check-config
in_root rm -rf /etc/pact/ca.pem /etc/pact/journal-ca.pem /etc/pact/journal-ca-key.pem /var/lib/pact-journal /tmp/root-ca /tmp/j1.csr /tmp/j1-ca.pem
if out=$(in_root /usr/bin/pact-agent --config /etc/pact/agent.yaml --check-config 2>&1); then
	echo "package-check: --check-config called agent.yaml valid without /etc/pact/ca.pem:" >&2; echo "$out" >&2; exit 1
fi
case $out in *"--ca /etc/pact/ca.pem"*) ;; *) echo "package-check: unexpected pact-agent --check-config answer without a root:" >&2; echo "$out" >&2; exit 1 ;; esac
echo "agent without a root, as expected: $out"
echo "== the installed mkroot.sh, with the installed unit (docs/diskless.md), and the copyright file"
in_root sh -c 'echo ca > /tmp/ca.pem && /usr/share/pact/diskless/mkroot.sh /tmp/image /usr/bin/pact-agent /tmp/ca.pem 10.0.0.1:7443 &&
	cmp /tmp/image/usr/lib/systemd/system/pact-agent.service /usr/lib/systemd/system/pact-agent.service &&
	cmp /tmp/image/usr/lib/sysusers.d/pact.conf /usr/lib/sysusers.d/pact.conf && rm -rf /tmp/image /tmp/ca.pem'
grep -q '^Files: go-module/google.golang.org/grpc/\*$' "$root/usr/share/doc/pact/copyright" || { echo "package-check: /usr/share/doc/pact/copyright lacks the linked modules" >&2; exit 1; }
echo "ok"
echo "== systemd-analyze verify (the installed units, the installed binaries)"
mount -t proc proc "$root/proc"
out=$(in_root systemd-analyze verify /usr/lib/systemd/system/pact-journal.service /usr/lib/systemd/system/pact-agent.service 2>&1 || true)
umount "$root/proc"
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "ok"

echo "== dpkg -r pact, then dpkg -P pact"
in_root dpkg -r pact
for f in /usr/bin/pact-journal /usr/bin/pact-agent /usr/bin/pact /usr/lib/systemd/system/pact-agent.service /usr/share/pact/diskless/mkroot.sh; do
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

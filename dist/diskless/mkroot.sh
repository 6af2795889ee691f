#!/bin/sh
# Add pact-agent to a diskless node image's root tree (docs/diskless.md).
#
#   mkroot.sh ROOT PACT-AGENT CA.PEM JOURNALS [UNITDIR]
#
# ROOT is the image's root directory (the tree your image tool packs into
# a squashfs, an initramfs or an NFS root); PACT-AGENT the static binary
# (/usr/bin/pact-agent once the package is installed); CA.PEM the domain
# root certificate; JOURNALS the journal addresses,
# host:port[,host:port...]; UNITDIR a directory holding
# systemd/pact-agent.service and sysusers.d/pact.conf (the repository's
# dist/). Without UNITDIR they are taken from where this script is: the
# repository's dist/ when it runs from dist/diskless/, the installed
# /usr/lib/systemd/system/pact-agent.service and /usr/lib/sysusers.d/pact.conf
# when it runs from the package (/usr/share/pact/diskless/mkroot.sh).
#
# Set JOIN_TOKEN_FILE to a path on a tmpfs (e.g. /run/pact-token/join-token)
# for nodes registered with --require-token: agent.env then points
# PACT_AGENT_JOIN_TOKEN_FILE there, and the boot must put a fresh token in
# it before pact-agent starts (docs/diskless.md).
#
# What goes in is the same for every node: the binary, ca.pem, one
# settings file and the unit. No key, no certificate and nothing per node:
# the agent reads the hardware identity at boot, makes its key in memory
# and enrolls. It downloads nothing.
set -eu
root=${1:?usage: mkroot.sh ROOT PACT-AGENT CA.PEM JOURNALS [UNITDIR]}
agent=${2:?missing PACT-AGENT}
ca=${3:?missing CA.PEM}
journals=${4:?missing JOURNALS}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${5:-}" ]; then
	unit=$5/systemd/pact-agent.service sysusers=$5/sysusers.d/pact.conf
elif [ -f "$here/../systemd/pact-agent.service" ]; then
	unit=$here/../systemd/pact-agent.service sysusers=$here/../sysusers.d/pact.conf
else
	# Installed: /usr/share/pact/diskless -> /usr/lib/...
	unit=$here/../../../lib/systemd/system/pact-agent.service sysusers=$here/../../../lib/sysusers.d/pact.conf
fi
for f in "$unit" "$sysusers"; do
	[ -f "$f" ] || { echo "mkroot.sh: $f not found; give the directory holding systemd/ and sysusers.d/ as UNITDIR" >&2; exit 2; }
done

install -d -m 0755 "$root/usr/bin" "$root/etc/pact" "$root/usr/lib/systemd/system" \
	"$root/usr/lib/sysusers.d" "$root/etc/systemd/system/multi-user.target.wants" \
	"$root/etc/systemd/system/pact-agent.service.d"
install -m 0755 "$agent" "$root/usr/bin/pact-agent"
install -m 0644 "$ca" "$root/etc/pact/ca.pem"
install -m 0644 "$unit" "$root/usr/lib/systemd/system/pact-agent.service"
# The user the unit runs as, created at boot by systemd-sysusers.service.
# A read-only /etc cannot take it then: run systemd-sysusers --root=ROOT
# on the build host (docs/diskless.md).
install -m 0644 "$sysusers" "$root/usr/lib/sysusers.d/pact.conf"

cat > "$root/etc/pact/agent.env" <<ENV
# Baked into the image: the same for every node.
PACT_JOURNAL=$journals
PACT_CA=/etc/pact/ca.pem
ENV
if [ -n "${JOIN_TOKEN_FILE:-}" ]; then
	cat >> "$root/etc/pact/agent.env" <<ENV
# Nodes registered with --require-token: a fresh token for this boot,
# put here by the boot before pact-agent starts (docs/diskless.md).
PACT_AGENT_JOIN_TOKEN_FILE=$JOIN_TOKEN_FILE
ENV
fi
chmod 0644 "$root/etc/pact/agent.env"

# Diskless: the journals are only reachable once the network is configured,
# so start after network-online.target and pull in whichever wait-online
# service the image uses (systemd-networkd's here; NetworkManager's is
# NetworkManager-wait-online.service).
cat > "$root/etc/systemd/system/pact-agent.service.d/diskless.conf" <<'UNIT'
[Unit]
Wants=network-online.target systemd-networkd-wait-online.service
After=network-online.target systemd-networkd-wait-online.service
UNIT
chmod 0644 "$root/etc/systemd/system/pact-agent.service.d/diskless.conf"

# systemctl enable, done offline.
ln -sf /usr/lib/systemd/system/pact-agent.service "$root/etc/systemd/system/multi-user.target.wants/pact-agent.service"

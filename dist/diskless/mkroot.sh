#!/bin/sh
# Add pact-agent to a diskless node image's root tree (docs/diskless.md).
#
#   mkroot.sh ROOT PACT-AGENT CA.PEM JOURNALS [UNITDIR]
#
# ROOT is the image's root directory (the tree your image tool packs into
# a squashfs, an initramfs or an NFS root); PACT-AGENT the static binary;
# CA.PEM the domain root certificate; JOURNALS the journal addresses,
# host:port[,host:port...]; UNITDIR where pact-agent.service and
# sysusers.d/pact.conf come from (default: beside this script, ../).
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
dist=${5:-$(dirname "$0")/..}

install -d -m 0755 "$root/usr/bin" "$root/etc/pact" "$root/usr/lib/systemd/system" \
	"$root/usr/lib/sysusers.d" "$root/etc/systemd/system/multi-user.target.wants" \
	"$root/etc/systemd/system/pact-agent.service.d"
install -m 0755 "$agent" "$root/usr/bin/pact-agent"
install -m 0644 "$ca" "$root/etc/pact/ca.pem"
install -m 0644 "$dist/systemd/pact-agent.service" "$root/usr/lib/systemd/system/pact-agent.service"
# The user the unit runs as, created at boot by systemd-sysusers.service
# (a read-only /etc: bake a "pact" line into /etc/passwd and /etc/group).
install -m 0644 "$dist/sysusers.d/pact.conf" "$root/usr/lib/sysusers.d/pact.conf"

cat > "$root/etc/pact/agent.env" <<ENV
# Baked into the image: the same for every node.
PACT_JOURNAL=$journals
PACT_CA=/etc/pact/ca.pem
ENV
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

#!/bin/sh
# pact postinstall (deb: configure; rpm: $1 = 1 install, 2 upgrade).
# Creates the user the units run as (in group tss, for the TPM) and tells
# systemd about the units. It starts nothing: the operator fills in
# /etc/pact/journal.yaml or agent.env, then enables a unit. A journal needs
# the domain root certificate and a journal CA of its own from the offline
# ceremony first (journal.yaml's comment; /usr/share/doc/pact/quorum.md,
# "Forming a quorum on real hosts", and ceremony.md): never the root key.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/pact.conf
elif ! getent passwd pact >/dev/null 2>&1; then
	useradd --system --user-group --no-create-home --home-dir / --shell /usr/sbin/nologin pact
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	# An upgrade restarts what was running, with the new binary.
	for unit in pact-journal.service pact-agent.service; do
		systemctl try-restart "$unit" || true
	done
fi
exit 0

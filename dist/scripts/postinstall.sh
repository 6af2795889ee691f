#!/bin/sh
# pact postinstall (deb: configure; rpm: $1 = 1 install, 2 upgrade).
# Creates the user the units run as (in group tss, for the TPM) and tells
# systemd about the units. It starts nothing: the operator fills in
# /etc/pact/journal.yaml or agent.env, then enables a unit (it prints
# how, unless a unit is enabled already). A journal needs
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
# Neither unit is enabled by the package: say how, unless one already is
# (an upgrade of a host in service).
if ! systemctl is-enabled --quiet pact-journal.service 2>/dev/null && ! systemctl is-enabled --quiet pact-agent.service 2>/dev/null; then
	cat <<'EOF'
pact: installed; neither unit is enabled, and nothing was started.
  journal host: put the root certificate and the journal CA in place and fill in
    /etc/pact/journal.yaml (docs: /usr/share/doc/pact/quorum.md), check it with
    sudo -u pact pact-journal --config /etc/pact/journal.yaml --check-config
    then: systemctl enable --now pact-journal
  node: fill in /etc/pact/agent.yaml (journal addresses, ca), check it with
    pact-agent --config /etc/pact/agent.yaml --check-config
    then: systemctl enable --now pact-agent (an image: docs/diskless.md)
EOF
fi
exit 0

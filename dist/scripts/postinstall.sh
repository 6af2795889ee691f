#!/bin/sh
# pact postinstall (deb: configure; rpm: $1 = 1 install, 2 upgrade).
# Creates the user the units run as and tells systemd about the units. It
# starts nothing: the operator fills /etc/pact/*.env, then enables a unit.
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

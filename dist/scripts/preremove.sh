#!/bin/sh
# pact preremove (deb: remove | upgrade ...; rpm: $1 = 0 erase, 1 upgrade).
# On removal, stop and disable the units; an upgrade leaves them running.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now pact-journal.service pact-agent.service >/dev/null 2>&1 || true
	fi
	;;
esac
exit 0

#!/bin/sh
# pact postremove. The journal's state (/var/lib/pact-journal), the pact
# user and /etc/pact stay: a registry is never deleted by a package
# manager. Remove them by hand to start over.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0

#!/usr/bin/env bash
# Runs the three journals of docker-compose.yml: `compose.sh up` / `compose.sh down`.
set -euo pipefail
DIR=.pact-compose
BIN=${BIN:-bin}
COMPOSE=${COMPOSE:-docker-compose}

# pki runs the ceremony once, in the production layout (docs/ceremony.md):
# the root in $DIR/root, standing for the offline machine and mounted into
# no container; the root certificate in $DIR/pki (mounted into every
# journal); journal jN's CA in $DIR/keys/jN (mounted into jN only); the
# admin credential in $DIR/admin.
pki() {
  mkdir -p "$DIR/pki" "$DIR/admin"
  if [ ! -f "$DIR/root/ca.pem" ] && [ -f "$DIR/pki/ca-key.pem" ]; then
    # A $DIR from before journal CAs: its root leaves the journals' mount.
    mkdir -p "$DIR/root" && chmod 700 "$DIR/root"
    mv "$DIR/pki/ca.pem" "$DIR/pki/ca-key.pem" "$DIR/root/"
    rm -f "$DIR/pki/admin.pem" "$DIR/pki/admin-key.pem"
  fi
  [ -f "$DIR/root/ca.pem" ] || "$BIN/pact" ca init --dir "$DIR/root" --domain pact.local >/dev/null
  [ -f "$DIR/pki/ca.pem" ] || cp "$DIR/root/ca.pem" "$DIR/pki/ca.pem"
  [ -f "$DIR/admin/admin.pem" ] || "$BIN/pact" ca issue-admin --dir "$DIR/root" --name admin --out-dir "$DIR/admin" >/dev/null
  for id in j1 j2 j3; do
    mkdir -p "$DIR/keys/$id" "$DIR/$id" && chmod 700 "$DIR/keys/$id"
    [ -f "$DIR/keys/$id/journal-ca.pem" ] && continue
    rm -f "$DIR/keys/$id/request.csr"
    # The journal answers the host's CLI on 127.0.0.1 and its peers as jN.
    "$BIN/pact-journal" ca-request --journal-id "$id" --key "file:$DIR/keys/$id/journal-ca-key.pem" \
      --names "$id,localhost,127.0.0.1" --out "$DIR/keys/$id/request.csr" >/dev/null
    "$BIN/pact" ca sign-journal --dir "$DIR/root" --csr "$DIR/keys/$id/request.csr" --journal-id "$id" \
      --names "$id,localhost,127.0.0.1" --out "$DIR/keys/$id/journal-ca.pem" >/dev/null
  done
}

up() {
  pki
  $COMPOSE up -d
  for _ in $(seq 1 150); do
    n=$($COMPOSE logs 2>/dev/null | grep -c 'journal serving' || true)
    if [ "$n" -ge 3 ]; then
      local abs
      abs=$(cd "$DIR" && pwd)
      cat >"$DIR/env" <<ENV
export PACT_JOURNAL=127.0.0.1:7471,127.0.0.1:7472,127.0.0.1:7473
export PACT_CA=$abs/pki/ca.pem
export PACT_CERT=$abs/admin/admin.pem
export PACT_KEY=$abs/admin/admin-key.pem
ENV
      echo "three journal containers serving on 127.0.0.1:7471-7473 (metrics 7481-7483)"
      echo "for the CLI:  source $DIR/env && $BIN/pact journal status"
      return 0
    fi
    sleep 0.2
  done
  echo "the journals did not all start; see: $COMPOSE logs" >&2
  return 1
}

case "${1:-}" in
  up) up ;;
  down) $COMPOSE down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Runs the three journals of docker-compose.yml: `compose.sh up` / `compose.sh down`.
set -euo pipefail
DIR=.pact-compose
BIN=${BIN:-bin}
COMPOSE=${COMPOSE:-docker-compose}

up() {
  mkdir -p "$DIR/pki" "$DIR/j1" "$DIR/j2" "$DIR/j3"
  "$BIN/pact-journal" init --dir "$DIR/pki" --domain pact.local >/dev/null
  $COMPOSE up -d
  for _ in $(seq 1 150); do
    n=$($COMPOSE logs 2>/dev/null | grep -c 'journal serving' || true)
    if [ "$n" -ge 3 ]; then
      local abs
      abs=$(cd "$DIR/pki" && pwd)
      cat >"$DIR/env" <<ENV
export PACT_JOURNAL=127.0.0.1:7471,127.0.0.1:7472,127.0.0.1:7473
export PACT_CA=$abs/ca.pem
export PACT_CERT=$abs/admin.pem
export PACT_KEY=$abs/admin-key.pem
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

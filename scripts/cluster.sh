#!/usr/bin/env bash
# Runs a three-journal pact quorum on loopback: `cluster.sh up` / `cluster.sh down`,
# or two federated domains: `cluster.sh domains-up` / `cluster.sh domains-down`
# (make cluster-domains; state in $DOMAINS_DIR, default ./.pact-domains),
# `cluster.sh join jN` to add an empty journal jN to the running quorum, and
# `cluster.sh stop jN` to stop one journal (`up` starts what is not running,
# with the binaries in $BIN: how docs/upgrade.md upgrades one at a time).
# State lives in $DIR (default ./.pact-cluster), in the production layout
# (docs/ceremony.md): root/ holds the domain root and its key, standing for
# the offline ceremony machine (no journal is given the key); keys/ a
# journal CA per journal (certificate and key file); the root certificate
# and the admin credential; one data directory, log and pid file per
# journal; and `env` with the exports for the CLI.
set -euo pipefail
DIR=${DIR:-.pact-cluster}
BIN=${BIN:-bin}
N=3

# pki runs the ceremony once: the root, the first platform-admin
# credential, and the journal CAs of j1..jN. A $DIR from before journal CAs
# (the root key beside the data directories) is migrated as
# docs/migration.md says: its root moves into root/.
pki() {
  mkdir -p "$DIR"
  if [ ! -f "$DIR/root/ca.pem" ] && [ -f "$DIR/ca-key.pem" ]; then
    mkdir -p "$DIR/root" && chmod 700 "$DIR/root"
    mv "$DIR/ca.pem" "$DIR/ca-key.pem" "$DIR/root/"
    echo "moved the domain root of $DIR into $DIR/root (journal CAs from now on: docs/migration.md)"
  fi
  if [ ! -f "$DIR/root/ca.pem" ]; then
    "$BIN/pact" ca init --dir "$DIR/root" --domain pact.local >/dev/null
  fi
  [ -f "$DIR/ca.pem" ] || cp "$DIR/root/ca.pem" "$DIR/ca.pem"
  if [ ! -f "$DIR/admin.pem" ]; then
    "$BIN/pact" ca issue-admin --dir "$DIR/root" --name admin --out-dir "$DIR" >/dev/null
  fi
  for i in $(seq 1 "$1"); do journal_ca "j$i"; done
}

# journal_ca makes journal $1's journal CA if it has none: the key and its
# request on the journal host, the certificate signed with the root.
journal_ca() {
  local id=$1
  mkdir -p "$DIR/keys" && chmod 700 "$DIR/keys"
  [ -f "$DIR/keys/$id-ca.pem" ] && return 0
  rm -f "$DIR/keys/$id.csr"
  "$BIN/pact-journal" ca-request --journal-id "$id" --key "file:$DIR/keys/$id-ca-key.pem" \
    --names "$id,localhost,127.0.0.1" --out "$DIR/keys/$id.csr" >/dev/null
  "$BIN/pact" ca sign-journal --dir "$DIR/root" --csr "$DIR/keys/$id.csr" --journal-id "$id" \
    --names "$id,localhost,127.0.0.1" --out "$DIR/keys/$id-ca.pem" >/dev/null
}

# journal_pki is the flags of journal $1's PKI.
journal_pki() {
  echo --root-cert "$DIR/ca.pem" --journal-ca-cert "$DIR/keys/$1-ca.pem" --journal-ca-key "file:$DIR/keys/$1-ca-key.pem"
}

up() {
  pki $N
  local peers="" grpc=""
  for i in $(seq 1 $N); do
    peers="${peers:+$peers,}j$i=127.0.0.1:$((7500 + i))"
    grpc="${grpc:+$grpc,}127.0.0.1:$((7450 + i))"
  done
  local want=$N started=""
  for i in $(seq 1 $N); do
    if [ -f "$DIR/j$i.pid" ] && kill -0 "$(cat "$DIR/j$i.pid")" 2>/dev/null; then
      echo "j$i is already running (pid $(cat "$DIR/j$i.pid"))"; continue
    fi
    # A journal removed from the quorum (pact journal remove) must not come
    # back as if nothing happened: pact-journal would refuse (exit 3) anyway.
    if [ -f "$DIR/j$i/REMOVED" ]; then
      echo "j$i was removed from the quorum; not starting it (to bring it back: rm -rf $DIR/j$i, start it with --join, then pact journal add j$i 127.0.0.1:$((7500 + i)))" >&2
      want=$((want - 1)); continue
    fi
    "$BIN/pact-journal" --node-id "j$i" --data-dir "$DIR/j$i" \
      --listen "127.0.0.1:$((7450 + i))" --raft-listen "127.0.0.1:$((7500 + i))" \
      --metrics-listen "127.0.0.1:$((7460 + i))" \
      $(journal_pki "j$i") \
      --initial-cluster "$peers" >"$DIR/j$i.log" 2>&1 &
    echo $! >"$DIR/j$i.pid"
    started="$started $i"
  done
  local abs
  abs=$(cd "$DIR" && pwd)
  cat >"$DIR/env" <<ENV
export PACT_JOURNAL=$grpc
export PACT_CA=$abs/ca.pem
export PACT_CERT=$abs/admin.pem
export PACT_KEY=$abs/admin-key.pem
ENV
  # Ready once every journal serves (they wait for a leader first); a
  # journal that exits instead (say, an empty one refusing to bootstrap a
  # second quorum after a recovery) is reported with its reason.
  for _ in $(seq 1 150); do
    if [ "$(grep -l 'journal serving' "$DIR"/j*.log 2>/dev/null | wc -l)" -ge $want ]; then
      echo "$want of $N journals serving on $grpc (Raft on 127.0.0.1:7501-7503, metrics on 127.0.0.1:7461-7463)"
      echo "state and logs in $DIR/; for the CLI:  source $DIR/env && $BIN/pact journal status"
      return 0
    fi
    # Only the journals this run started: a pid file left by one that
    # exited earlier (removed, say) is not this start's failure.
    local dead=0
    for i in $started; do
      [ -f "$DIR/j$i.pid" ] || continue
      kill -0 "$(cat "$DIR/j$i.pid")" 2>/dev/null || dead=1
    done
    if [ $dead = 1 ]; then
      # Give the others a moment to fail the same way, then report them all.
      sleep 2
      for i in $started; do
        [ -f "$DIR/j$i.pid" ] || continue
        if ! kill -0 "$(cat "$DIR/j$i.pid")" 2>/dev/null; then
          echo "j$i exited: $(grep 'cannot start' "$DIR/j$i.log" | tail -1)" >&2
          rm -f "$DIR/j$i.pid"
        fi
      done
      echo "not every journal started; see $DIR/j*.log (add a wiped journal with: $0 join jN; one the quorum still lists needs pact journal remove jN first)" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "the journals did not all start; see $DIR/j*.log" >&2
  return 1
}

# join jN: start journal jN empty with --join and add it to the running
# quorum (pact journal add): how a lost journal comes back after
# pact-journal recover (docs/quorum.md, "Recovering from a lost majority").
join() {
  local id=${1:-}
  case "$id" in j[1-9]) ;; *) echo "usage: $0 join jN (N from 1 to $N)" >&2; exit 2 ;; esac
  local i=${id#j}
  if [ -f "$DIR/$id.pid" ] && kill -0 "$(cat "$DIR/$id.pid")" 2>/dev/null; then
    echo "$id is already running (pid $(cat "$DIR/$id.pid"))" >&2; exit 1
  fi
  if [ -e "$DIR/$id" ] && [ -n "$(ls -A "$DIR/$id" 2>/dev/null)" ]; then
    echo "$DIR/$id holds a journal's state: a journal joins empty (move it aside: mv $DIR/$id $DIR/$id.old)" >&2; exit 1
  fi
  # shellcheck disable=SC1091
  . "$DIR/env"
  # A journal the quorum still lists (its disk was wiped; it was never
  # removed) must not come back as an empty voter: it could vote a stale
  # candidate in. Remove it first.
  # (journal status exits non-zero while a voter is down, and still answers)
  local members
  members=$("$BIN/pact" journal status -o json 2>/dev/null || true)
  if [ -z "$members" ]; then
    echo "cannot read the quorum's members (pact journal status); is the quorum up?" >&2; exit 1
  fi
  if printf '%s' "$members" | grep -q "\"journal_id\": *\"$id\""; then
    echo "$id is still a member of the quorum; remove it first: $BIN/pact journal remove $id (then run this again)" >&2; exit 1
  fi
  journal_ca "$id"
  "$BIN/pact-journal" --node-id "$id" --data-dir "$DIR/$id" \
    --listen "127.0.0.1:$((7450 + i))" --raft-listen "127.0.0.1:$((7500 + i))" \
    --metrics-listen "127.0.0.1:$((7460 + i))" \
    $(journal_pki "$id") --join >"$DIR/$id.log" 2>&1 &
  local pid=$!
  echo $pid >"$DIR/$id.pid"
  # Stop what this run started if it goes no further, so a second join
  # is not refused as "already running".
  giveup() { kill "$pid" 2>/dev/null || true; rm -f "$DIR/$id.pid"; echo "$1; see $DIR/$id.log" >&2; exit 1; }
  local waiting=0
  for _ in $(seq 1 150); do
    if grep -q 'waiting to be added' "$DIR/$id.log" 2>/dev/null; then waiting=1; break; fi
    kill -0 "$pid" 2>/dev/null || giveup "$id exited before waiting to be added"
    sleep 0.2
  done
  [ $waiting = 1 ] || giveup "$id did not start waiting to be added within 30 s"
  "$BIN/pact" journal add "$id" "127.0.0.1:$((7500 + i))" || giveup "pact journal add $id failed"
  for _ in $(seq 1 300); do
    if grep -q 'journal serving' "$DIR/$id.log" 2>/dev/null; then
      echo "$id joined the quorum and serves on 127.0.0.1:$((7450 + i))"
      return 0
    fi
    sleep 0.2
  done
  echo "$id did not start serving; see $DIR/$id.log" >&2
  return 1
}

# stop jN: stop one journal (SIGTERM, then SIGKILL after 5 s); its state
# stays.
stop() {
  local id=${1:-}
  case "$id" in j[1-9]) ;; *) echo "usage: $0 stop jN" >&2; exit 2 ;; esac
  local f="$DIR/$id.pid"
  if [ ! -f "$f" ] || ! kill -0 "$(cat "$f")" 2>/dev/null; then
    rm -f "$f"; echo "$id is not running"; return 0
  fi
  local pid
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
  echo "$id stopped; state kept in $DIR/$id (start it again: $0 up, with BIN= the binaries to run)"
}

down() {
  for f in "$DIR"/j*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  echo "stopped; state kept in $DIR (rm -rf $DIR to start afresh)"
}

# Two federated domains for a newcomer (docs/domains.md, "Try it"): a.example
# and b.example, each one --dev journal under a root of its own, state in
# $DOMAINS_DIR/a and $DOMAINS_DIR/b. Journal gRPC on 127.0.0.1:7471 (a) and
# 7472 (b), bundle endpoints (and claim feeds) on 8471 and 8472, metrics on
# 7481 and 7482; claims polled every 2 s. Each federates the other: A with
# policy warn, B with policy refuse. Writes $DOMAINS_DIR/a.env and b.env
# with the exports for the CLI.
DOMAINS_DIR=${DOMAINS_DIR:-.pact-domains}

domains_up() {
  mkdir -p "$DOMAINS_DIR"
  local abs
  abs=$(cd "$DOMAINS_DIR" && pwd)
  local d i
  for d in a b; do
    i=1; [ $d = b ] && i=2
    if [ -f "$DOMAINS_DIR/$d.pid" ] && kill -0 "$(cat "$DOMAINS_DIR/$d.pid")" 2>/dev/null; then
      echo "domain $d.example is already running (pid $(cat "$DOMAINS_DIR/$d.pid"))"
    else
      "$BIN/pact-journal" --dev --domain "$d.example" --data-dir "$DOMAINS_DIR/$d" \
        --listen "127.0.0.1:$((7470 + i))" --metrics-listen "127.0.0.1:$((7480 + i))" \
        --bundle-endpoint-listen "127.0.0.1:$((8470 + i))" --digest-interval 2s >"$DOMAINS_DIR/$d.log" 2>&1 &
      echo $! >"$DOMAINS_DIR/$d.pid"
    fi
    cat >"$DOMAINS_DIR/$d.env" <<ENV
export PACT_JOURNAL=127.0.0.1:$((7470 + i))
export PACT_CA=$abs/$d/ca.pem
export PACT_CERT=$abs/$d/admin.pem
export PACT_KEY=$abs/$d/admin-key.pem
ENV
  done
  for d in a b; do
    local up=0
    for _ in $(seq 1 150); do
      if grep -q 'serving on' "$DOMAINS_DIR/$d.log" 2>/dev/null; then up=1; break; fi
      if ! kill -0 "$(cat "$DOMAINS_DIR/$d.pid")" 2>/dev/null; then break; fi
      sleep 0.2
    done
    if [ $up = 0 ]; then
      echo "domain $d.example did not start; see $DOMAINS_DIR/$d.log" >&2
      return 1
    fi
  done
  # Each federates the other (a replacement when already federated): its
  # bundle endpoint and its root as the bootstrap bundle. A fresh journal
  # raises its quorum feature level to 3 (federation's) within moments:
  # QUORUM_VERSION (exit 6) until then is tried again.
  local from to policy out
  for from in a b; do
    if [ $from = a ]; then to=b; policy=warn; else to=a; policy=refuse; fi
    local port=8471; [ $to = b ] && port=8472
    for try in $(seq 1 50); do
      if out=$(. "$DOMAINS_DIR/$from.env" && "$BIN/pact" domain federate "$to.example" \
        --endpoint "https://127.0.0.1:$port/" --bundle "$abs/$to/ca.pem" --policy $policy 2>&1); then
        break
      fi
      if [ "$try" = 50 ]; then echo "$from.example could not federate $to.example: $out" >&2; return 1; fi
      sleep 0.2
    done
    echo "$from.example federates $to.example (policy $policy)"
  done
  echo "two federated domains: a.example on 127.0.0.1:7471, b.example on 127.0.0.1:7472 (bundle endpoints 127.0.0.1:8471, 8472)"
  echo "state and logs in $DOMAINS_DIR/; for the CLI:  source $DOMAINS_DIR/a.env && $BIN/pact domain list   (b.env for b.example)"
}

domains_down() {
  local d pid
  for d in a b; do
    [ -f "$DOMAINS_DIR/$d.pid" ] || continue
    pid=$(cat "$DOMAINS_DIR/$d.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$DOMAINS_DIR/$d.pid"
  done
  echo "stopped; state kept in $DOMAINS_DIR (rm -rf $DOMAINS_DIR to start afresh)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  join) join "${2:-}" ;;
  stop) stop "${2:-}" ;;
  domains-up) domains_up ;;
  domains-down) domains_down ;;
  *) echo "usage: $0 up|down|join jN|stop jN|domains-up|domains-down" >&2; exit 2 ;;
esac

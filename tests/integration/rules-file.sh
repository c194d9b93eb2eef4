#!/usr/bin/env bash
# The rules file (README, "Rules file"), given by R2SOCK_CONFIG to every
# process: two python3 pairs (hold_peer.py) each move 4 MiB client ->
# server, verified byte for byte at the server, and hold their connections
# open while r2sock-stat --json reports on all four ends. The file says:
#   upgrade = never                      (the default: rules allow, not deny)
#   a bad rule line                      (line 3)
#   rule upgrade=never port=P1 peer=127.0.0.0/8, and lport=P1 for the server
#   rule upgrade=now port=P2, and lport=P2 for the server
# shm variant (R2SOCK_UPGRADE unset, so the file's default applies): both
#   ends of P1 stay on TCP because of a rule: r2sock-stat shows tcp(rule),
#   each process counts tcp_rule=1 and conn_shm=0; both ends of P2 upgrade
#   although the default says never: shm, conn_shm=1, and the client sent
#   at least 90% of its bytes through shared memory.
# tcp variant (R2SOCK_UPGRADE=never in the environment, the pass-through
#   switch): no rule applies: every end is tcp(disabled), tcp_disabled=1,
#   tcp_rule=0.
# Either way every process warns about line 3 exactly once, naming the file
# and the line, and the rules after it still apply.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/hold_peer.py
STAT=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/r2sock-stat
BYTES=$((4 << 20))
variant=plain
if [[ -n $R2SOCK_LIB ]]; then
  [[ -x $STAT ]] || fail "r2sock-stat not built: expected it at $STAT (set R2SOCK_BUILD to the build dir)"
  if [[ ${R2SOCK_UPGRADE:-} == never ]]; then
    variant=tcp
  else
    variant=shm
    unset R2SOCK_UPGRADE # the file's default decides
  fi
fi

p1=$(free_port)
p2=$(free_port)
conf=$TMP/r2sock.conf
cat >"$conf" <<EOF
upgrade = never
# a bad line: ignored with a warning, and nothing else changes
rule upgrade=sometimes port=$p1
rule upgrade=never port=$p1 peer=127.0.0.0/8
rule upgrade=never lport=$p1
rule upgrade=now port=$p2
rule upgrade=now lport=$p2
EOF
export R2SOCK_CONFIG=$conf
log "variant $variant; P1=$p1 stays on TCP by rule, P2=$p2 upgrades by rule"

# The servers first: they must not inherit the fifos below. The clients
# hold their connections until their stdin (a fifo) ends: the shell keeps
# each fifo's only writer open (fds 3 and 4) and closes it to let go.
declare -A spid cpid
for p in "$p1" "$p2"; do
  start_server_at "srv-$p" "$p" "$TMP/srv-$p.stats" "$PY" "$PEER" server --port "$p" --bytes "$BYTES"
  spid[$p]=$(child_of "$(server_pid "srv-$p")")
done
fd=3
for p in "$p1" "$p2"; do
  mkfifo "$TMP/hold-$p"
  eval "exec $fd<>\"\$TMP/hold-$p\""
  shim_at "$TMP/cli-$p.stats"
  timeout -k 5 60 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$p" --bytes "$BYTES" <"$TMP/hold-$p" 3>&- 4>&- \
    >"$TMP/cli-$p.log" 2>&1 &
  # Listed with the servers, so that a failure's cleanup ends it too.
  R2S_SERVER_PID["cli-$p"]=$!
  cpid[$p]=$(child_of "$!")
  fd=$((fd + 1))
done
for p in "$p1" "$p2"; do
  deadline=$((SECONDS + 30))
  until grep -q "^hold_peer client: sent=$BYTES$" "$TMP/cli-$p.log"; do
    alive "${cpid[$p]}" || fail "the client of port $p exited before it sent its bytes: $(cat "$TMP/cli-$p.log")"
    ((SECONDS < deadline)) || fail "the client of port $p did not send $BYTES bytes within 30 s"
    sleep 0.05
  done
done

# json_path PID PORT: the path of PID's open connection on PORT as
# r2sock-stat --json shows it ("shm", "tcp(rule)"), once the shims'
# handshake is through.
json_path() {
  local pid=$1 port=$2 got deadline=$((SECONDS + 20))
  while :; do
    "$STAT" --json -p "$pid" >"$TMP/stat.json" || fail "r2sock-stat --json -p $pid failed"
    got=$(/usr/bin/python3 - "$TMP/stat.json" "$pid" "$port" <<'EOF'
import json, sys
f, pid, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
procs = [p for p in json.load(open(f))["processes"] if p["pid"] == pid]
conns = [c for p in procs for c in p["connections"]
         if c["state"] == "open" and port in ((c["local"] or {}).get("port"), (c["peer"] or {}).get("port"))]
if len(conns) != 1:
    sys.exit(f"expected one open connection of pid {pid} on port {port}, saw {conns}")
c = conns[0]
print(c["path"] if c["reason"] is None else f"{c['path']}({c['reason']})")
EOF
    ) || fail "pid $pid: $got: $(cat "$TMP/stat.json")"
    [[ $got != *"(negotiating)" ]] && break
    ((SECONDS < deadline)) || fail "pid $pid, port $port: still negotiating after 20 s"
    sleep 0.1
  done
  echo "$got"
}

if [[ $variant != plain ]]; then
  for p in "$p1" "$p2"; do
    want=tcp\(disabled\)
    [[ $variant == shm && $p == "$p1" ]] && want=tcp\(rule\)
    [[ $variant == shm && $p == "$p2" ]] && want=shm
    for who in client server; do
      if [[ $who == client ]]; then pid=${cpid[$p]}; else pid=${spid[$p]}; fi
      got=$(json_path "$pid" "$p")
      # A server that has only read since the switch may show its send
      # direction still on TCP: shm(rx) is the upgrade seen from there.
      [[ $got == "$want" || ($want == shm && $got == "shm(rx)") ]] ||
        fail "port $p, $who (pid $pid): r2sock-stat --json shows '$got', expected '$want'"
      log "port $p, $who: r2sock-stat --json: $got"
    done
  done
fi

exec 3>&- 4>&-
for p in "$p1" "$p2"; do
  wait_server "cli-$p"
  wait_server "srv-$p"
  # The bytes, end to end: the server compared them with the seeded stream.
  grep -q "^hold_peer server: received=$BYTES$" "$TMP/srv-$p.log" ||
    fail "port $p: the server did not verify $BYTES bytes: $(cat "$TMP/srv-$p.log")"
done

# One warning per process for the bad line, with the file and the line.
warning="warning: $conf:3: upgrade=sometimes: expected never, now, auto or a size such as 64K; line ignored"
for f in "$TMP"/srv-*.log "$TMP"/cli-*.log; do
  n=$(grep -cF "$warning" "$f" || true)
  want_n=1
  [[ $variant == plain ]] && want_n=0
  ((n == want_n)) || fail "$(basename "$f"): expected the warning for line 3 $want_n time(s), saw $n: $(cat "$f")"
  others=$(grep -c 'r2sock\[[0-9]*\]: warning' "$f" || true)
  ((others == want_n)) || fail "$(basename "$f"): expected no other warning: $(grep warning "$f")"
done

if [[ $variant != plain ]]; then
  # stat_of FILE KEY: KEY in the one process's stats line of FILE.
  stat_of() { STATS=$1 stats_sum "$2"; }
  for p in "$p1" "$p2"; do
    for side in srv cli; do
      f=$TMP/$side-$p.stats
      [[ $(grep -c ' stats: ' "$f") == 1 ]] || fail "$side-$p: expected one stats line: $(cat "$f")"
      seen=$(stat_of "$f" conn_seen) shm=$(stat_of "$f" conn_shm) rule=$(stat_of "$f" tcp_rule)
      disabled=$(stat_of "$f" tcp_disabled)
      want="conn_seen=1 conn_shm=0 tcp_rule=0 tcp_disabled=1"
      [[ $variant == shm && $p == "$p1" ]] && want="conn_seen=1 conn_shm=0 tcp_rule=1 tcp_disabled=0"
      [[ $variant == shm && $p == "$p2" ]] && want="conn_seen=1 conn_shm=1 tcp_rule=0 tcp_disabled=0"
      got="conn_seen=$seen conn_shm=$shm tcp_rule=$rule tcp_disabled=$disabled"
      [[ $got == "$want" ]] || fail "$side-$p: expected $want, saw $got: $(cat "$f")"
      log "$side-$p: $got"
    done
    tx_tcp=$(stat_of "$TMP/cli-$p.stats" bytes_tcp_tx) tx_shm=$(stat_of "$TMP/cli-$p.stats" bytes_shm_tx)
    ((tx_tcp + tx_shm >= BYTES)) || fail "cli-$p: sent $tx_tcp over TCP and $tx_shm through shm, fewer than $BYTES"
    if [[ $variant == shm && $p == "$p2" ]]; then
      ((tx_shm * 10 >= BYTES * 9)) || fail "cli-$p: expected >= 90% of $BYTES bytes through shm, saw $tx_shm"
    else
      ((tx_shm == 0)) || fail "cli-$p: expected every byte over TCP, saw bytes_shm_tx=$tx_shm"
    fi
  done
fi
log PASS

#!/usr/bin/env bash
# Live statistics: r2sock-stat reads the segment each process under the shim
# publishes (src/statseg.h).
#   usage: statseg.sh live|off|killed|export
#   live:   an iperf3 pair transfers; r2sock-stat --once -c -p PID lists the
#           data connection of each end on the expected path (shm for the
#           direction that moves the data, or tcp(disabled) when
#           R2SOCK_UPGRADE=never) with bytes > 0 that grow
#           between two snapshots; after both exit their segments are gone.
#   off:    with R2SOCK_STATSEG=0 a connected pair has no segment.
#   killed: a server killed with SIGKILL (no destructor) is not listed, and
#           its segment is removed (by r2sock-stat reading it, or by another
#           process under the shim sweeping it first).
#   export: a python3 pair (hold_peer.py) moves 8 MiB and holds its
#           connection open; for each end, r2sock-stat --json -p PID parses,
#           names that pid and program, and shows the connection on the
#           expected path with at least the 8 MiB in the direction they
#           went; --prometheus (every process, and -p PID) passes the strict
#           check of tests/unit/prom_check.py and has those samples.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need iperf3

mode=${1:?usage: statseg.sh live|off|killed|export}
[[ -n $R2SOCK_LIB ]] || skip "the live statistics exist only under the shim (R2SOCK_LIB is empty)"
STAT=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/r2sock-stat
[[ -x $STAT ]] || fail "r2sock-stat not built: expected it at $STAT (set R2SOCK_BUILD to the build dir)"
case ${R2SOCK_UPGRADE:-never} in
  now) want_path=shm ;;
  never) want_path="tcp(disabled)" ;;
  *) fail "R2SOCK_UPGRADE must be now or never for this test, not '$R2SOCK_UPGRADE'" ;;
esac
SEG=/dev/shm/r2s-stat-

# data_line PID PORT: the line of `r2sock-stat --once -c -p PID` for the
# connection to or from PORT that moved the most bytes, as
# "fd local peer path sent recv"; empty when there is none yet, also when
# the process has no segment yet: a process publishes one with its first TCP
# socket, and the client may not have made it when it is first looked at
# (r2sock-stat then says so and exits 1; under set -e and pipefail that
# ended this test silently, its cleanup killed the server and the client
# reported "Connection refused"). Any other failure of r2sock-stat fails.
data_line() {
  local out rc=0
  out=$("$STAT" --once -c -p "$1" 2>"$TMP/stat.err") || rc=$?
  if ((rc != 0)); then
    grep -q "^r2sock-stat: no live statistics for pid $1 " "$TMP/stat.err" && return 0
    fail "r2sock-stat --once -c -p $1 failed (status $rc): $(cat "$TMP/stat.err")"
  fi
  awk -v port="$2" '
    $1 ~ /^[0-9]+$/ && $4 == "->" && ($3 ~ ":" port "$" || $5 ~ ":" port "$") && $6 != "listen" {
      if ($7 + $8 >= best) { best = $7 + $8; line = $2 " " $3 " " $5 " " $6 " " $7 " " $8 }
    } END { if (line != "") print line }' <<<"$out"
}

# start_client PORT SECS: an iperf3 client under the shim in the background,
# rate-limited so that it shares the machine; sets CLIENT_PID (of timeout).
start_client() {
  timeout -k 5 60 "${SHIM[@]}" iperf3 -c 127.0.0.1 -p "$1" -t "$2" -b 800M >"$TMP/client.log" 2>&1 &
  CLIENT_PID=$!
}

case $mode in
live)
  port=$(free_port)
  start_server iperf3-server "$port" iperf3 -s -1 -B 127.0.0.1 -p "$port"
  spid=$(child_of "$(server_pid iperf3-server)")
  start_client "$port" 6
  cpid=$(child_of "$CLIENT_PID")
  log "server pid $spid, client pid $cpid, expecting path $want_path"
  for who in client server; do
    [[ $who == client ]] && pid=$cpid col=5 || { pid=$spid; col=6; }
    # The data connection shows up once iperf3 has made it and moved bytes,
    # and its path is decided once the shims' handshake is through.
    deadline=$((SECONDS + 20)) first=""
    while :; do
      first=$(data_line "$pid" "$port")
      [[ -n $first && $first != *"(negotiating)"* ]] && (($(cut -d' ' -f"$col" <<<"$first") > 0)) && break
      alive "$pid" || fail "$who (pid $pid) exited before its connection was listed with bytes > 0; last: '$first'"
      ((SECONDS < deadline)) || fail "$who (pid $pid): no decided connection with bytes > 0 listed after 20 s; last: '$first'"
      sleep 0.1
    done
    read -r _ _ _ path _ _ <<<"$first"
    # A direction that has carried nothing since the switch may still show
    # TCP: then the one that moves the data is named, shm(tx) or shm(rx).
    dir=tx; [[ $who == server ]] && dir=rx
    [[ $path == "$want_path" || ($want_path == shm && $path == "shm($dir)") ]] ||
      fail "$who (pid $pid): expected path $want_path or $want_path($dir), r2sock-stat shows '$first'"
    # Bytes grow while iperf3 runs (it sends for 6 s).
    deadline=$((SECONDS + 10))
    while :; do
      sleep 0.2
      second=$(data_line "$pid" "$port")
      [[ -n $second ]] || fail "$who (pid $pid): its connection left the listing while transferring (first: '$first')"
      (($(cut -d' ' -f"$col" <<<"$second") > $(cut -d' ' -f"$col" <<<"$first"))) && break
      ((SECONDS < deadline)) || fail "$who (pid $pid): bytes did not grow in 10 s: '$first' then '$second'"
    done
    log "$who: '$first' then '$second'"
    [[ -f $SEG$pid ]] || fail "$who (pid $pid): r2sock-stat listed it, yet $SEG$pid does not exist"
  done
  wait "$CLIENT_PID" || fail "iperf3 client failed (status $?): $(tail -n 3 "$TMP/client.log")"
  wait_server iperf3-server
  # The destructor removes the name at exit.
  for pid in "$cpid" "$spid"; do
    [[ ! -e $SEG$pid ]] || fail "pid $pid exited normally, yet $SEG$pid is still there"
  done
  out=$("$STAT" --once -p "$cpid" 2>&1) && fail "r2sock-stat -p $cpid still lists the exited client: $out"
  check_stats conns=4 bulk=2 bytes=1 procs=2
  ;;
off)
  SHIM+=(R2SOCK_STATSEG=0)
  port=$(free_port)
  start_server iperf3-server "$port" iperf3 -s -1 -B 127.0.0.1 -p "$port"
  spid=$(child_of "$(server_pid iperf3-server)")
  start_client "$port" 3
  cpid=$(child_of "$CLIENT_PID")
  # Connected (two connections: control and data), and moving bytes.
  deadline=$((SECONDS + 20))
  until (($(ss -Htn state established "( dport = :$port )" | wc -l) >= 2)); do
    ((SECONDS < deadline)) || fail "iperf3 did not connect within 20 s"
    sleep 0.1
  done
  for pid in "$cpid" "$spid"; do
    alive "$pid" || fail "pid $pid exited before the check"
    [[ ! -e $SEG$pid ]] || fail "R2SOCK_STATSEG=0, yet pid $pid has $SEG$pid"
    out=$("$STAT" --once -p "$pid" 2>&1) && fail "R2SOCK_STATSEG=0, yet r2sock-stat lists pid $pid: $out"
  done
  wait "$CLIENT_PID" || fail "iperf3 client failed (status $?): $(tail -n 3 "$TMP/client.log")"
  wait_server iperf3-server
  check_stats conns=4 bulk=2 bytes=1 procs=2
  ;;
killed)
  port=$(free_port)
  start_server iperf3-server "$port" iperf3 -s -1 -B 127.0.0.1 -p "$port"
  spid=$(child_of "$(server_pid iperf3-server)")
  # Listening is enough for a segment.
  out=$("$STAT" --once -p "$spid") || fail "r2sock-stat does not list the listening server (pid $spid)"
  awk -v p="$spid" '$1 == p && $7 == 1 { ok = 1 } END { exit !ok }' <<<"$out" ||
    fail "expected pid $spid with LISTEN 1 in: $out"
  [[ -f $SEG$spid ]] || fail "r2sock-stat listed pid $spid, yet $SEG$spid does not exist"
  kill -KILL "$spid"
  deadline=$((SECONDS + 10))
  while alive "$spid"; do
    ((SECONDS < deadline)) || fail "pid $spid still alive 10 s after SIGKILL"
    sleep 0.05
  done
  out=$("$STAT" --once -p "$spid" 2>&1) && fail "r2sock-stat lists the killed pid $spid: $out"
  [[ ! -e $SEG$spid ]] || fail "r2sock-stat read the dead pid $spid's segment but left $SEG$spid"
  wait_server iperf3-server 10 137
  ;;
export)
  # A python3 pair under the shim moves BYTES client -> server and holds
  # the connection open while r2sock-stat reports on both ends.
  r2s_python
  PEER=$(dirname "$0")/hold_peer.py
  CHECK=$(dirname "$0")/../unit/prom_check.py
  BYTES=$((8 << 20))
  port=$(free_port)
  start_server hold-server "$port" "$PY" "$PEER" server --port "$port" --bytes "$BYTES"
  spid=$(child_of "$(server_pid hold-server)")
  # The client holds its connection until its stdin (the fifo) ends: the
  # shell keeps the fifo's only writer, fd 3, and closes it to let go.
  mkfifo "$TMP/hold"
  exec 3<>"$TMP/hold"
  timeout -k 5 60 "${SHIM[@]}" "$PY" "$PEER" client --port "$port" --bytes "$BYTES" <"$TMP/hold" 3>&- \
    >"$TMP/client.log" 2>&1 &
  CLIENT_PID=$!
  # Listed with the servers, so that a failure's cleanup ends it too.
  R2S_SERVER_PID["hold-client"]=$CLIENT_PID
  cpid=$(child_of "$CLIENT_PID")
  deadline=$((SECONDS + 30))
  until grep -q "^hold_peer client: sent=$BYTES$" "$TMP/client.log"; do
    alive "$cpid" || fail "the client (pid $cpid) exited before it sent its bytes: $(cat "$TMP/client.log")"
    ((SECONDS < deadline)) || fail "the client did not send $BYTES bytes within 30 s"
    sleep 0.05
  done
  program=$(basename "$PY")
  log "server pid $spid, client pid $cpid ($program), $BYTES bytes sent, expecting path $want_path"
  for who in client server; do
    if [[ $who == client ]]; then pid=$cpid dir=tx; else pid=$spid dir=rx; fi
    # The path is published by the connection's next call once the shims'
    # handshake is through: the "ok" read (client) and the last read (server).
    deadline=$((SECONDS + 20))
    while :; do
      "$STAT" --json -p "$pid" >"$TMP/$who.json" || fail "r2sock-stat --json -p $pid ($who) failed"
      /usr/bin/python3 -m json.tool "$TMP/$who.json" >/dev/null || fail "$who: --json is not JSON: $(cat "$TMP/$who.json")"
      grep -q '"reason": "negotiating"' "$TMP/$who.json" || break
      ((SECONDS < deadline)) || fail "$who (pid $pid): still negotiating after 20 s: $(cat "$TMP/$who.json")"
      sleep 0.1
    done
    /usr/bin/python3 - "$TMP/$who.json" "$pid" "$program" "$port" "$BYTES" "$dir" "$want_path" <<'EOF' ||
import json, sys
f, pid, program, port, nbytes, d, want = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
procs = json.load(open(f))["processes"]
if [p["pid"] for p in procs] != [pid]:
    sys.exit(f"expected exactly pid {pid}, saw {[p['pid'] for p in procs]}")
p = procs[0]
if p["program"] != program:
    sys.exit(f"expected program {program!r}, saw {p['program']!r}")
conns = [c for c in p["connections"]
         if c["state"] == "open" and port in ((c["local"] or {}).get("port"), (c["peer"] or {}).get("port"))]
if len(conns) != 1:
    sys.exit(f"expected one open connection on port {port}, saw {conns}")
c = conns[0]
path = c["path"] if c["reason"] is None else f"{c['path']}({c['reason']})"
if path != want:
    sys.exit(f"expected the connection on path {want}, saw {path}: {c}")
moved = sum(c["bytes"][d].values())
if moved < nbytes:
    sys.exit(f"expected the connection's {d} bytes >= {nbytes}, saw {c['bytes'][d]}")
if want == "shm" and c["bytes"][d]["shm"] == 0:
    sys.exit(f"the connection is on shm, yet its {d} bytes show none there: {c['bytes'][d]}")
if sum(p["bytes"][d].values()) < moved:
    sys.exit(f"the process's {d} bytes {p['bytes'][d]} are fewer than its connection's {c['bytes'][d]}")
if p["connections_open"][c["path"]] < 1:
    sys.exit(f"connections_open {p['connections_open']} does not count the connection on {c['path']}")
print(f"{pid}: {path}, {d} {c['bytes'][d]}")
EOF
      fail "$who (pid $pid): r2sock-stat --json: $(cat "$TMP/$who.json")"
    # The Prometheus text: strictly valid, for this process and for all of
    # them (whatever else runs under the shim here), and it says the same.
    "$STAT" --prometheus >"$TMP/all.prom" || fail "r2sock-stat --prometheus failed"
    /usr/bin/python3 "$CHECK" "$TMP/all.prom" >/dev/null || fail "r2sock-stat --prometheus (every process) is not valid"
    "$STAT" --prometheus -p "$pid" >"$TMP/$who.prom" || fail "r2sock-stat --prometheus -p $pid failed"
    l="pid=\"$pid\",program=\"$program\""
    /usr/bin/python3 "$CHECK" "$TMP/$who.prom" \
      --has "r2sock_connections_open{$l,path=\"${want_path%%(*}\"} >=1" \
      --has "r2sock_bytes_total{$l,path=\"${want_path%%(*}\",direction=\"$dir\"} >=1" ||
      fail "$who (pid $pid): r2sock-stat --prometheus: $(cat "$TMP/$who.prom")"
    /usr/bin/python3 - "$(dirname "$CHECK")" "$TMP/$who.prom" "$l" "$dir" "$BYTES" <<'EOF' ||
import sys
sys.path.insert(0, sys.argv[1])
import prom_check
series = prom_check.parse(open(sys.argv[2], encoding="utf-8").read())
labels, d, nbytes = sys.argv[3], sys.argv[4], int(sys.argv[5])
pid = labels.split('"')[1]
moved = sum(int(v) for (name, ls), v in series.items()
            if name == "r2sock_bytes_total" and dict(ls)["pid"] == pid and dict(ls)["direction"] == d)
if moved < nbytes:
    sys.exit(f"r2sock_bytes_total{{direction=\"{d}\"}} over the paths is {moved}, expected >= {nbytes}")
EOF
      fail "$who (pid $pid): r2sock-stat --prometheus bytes: $(grep r2sock_bytes_total "$TMP/$who.prom")"
  done
  exec 3>&-
  wait_server hold-client
  wait_server hold-server
  for pid in "$cpid" "$spid"; do
    [[ ! -e $SEG$pid ]] || fail "pid $pid exited normally, yet $SEG$pid is still there"
  done
  check_stats conns=2 bulk=2 bytes="$BYTES" procs=2
  ;;
*) fail "unknown mode '$mode'" ;;
esac
log PASS

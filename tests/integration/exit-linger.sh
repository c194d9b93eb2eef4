#!/usr/bin/env bash
# A client that exits before its peer has read its stream (README, process
# model: "exit"). Both ends under the shim.
#   usage: exit-linger.sh fill|clean
#   fill: the client fills the socket buffers without blocking, closes and
#         exits; only then does the server start reading, so its shim reads
#         the client's hello (and answers with frames) after the client has
#         gone. Every byte the client wrote must arrive, as with plain TCP.
#         Under now the client's exit hands the socket to a lingerer
#         (exit_lingered=1), which must be there while the server has not
#         read, and gone once the server has read to the end and closed.
#   bound: as fill, but the server reads nothing until the client's
#         lingerer has gone by itself: with R2SOCK_LINGER=2 (a stalled
#         peer) it must end without the peer's help. (The server's late
#         frames then meet a closed socket, as documented: the server is
#         stopped, not checked.)
#   clean: the client reads the server's reply to its end before it exits:
#         nothing is left to finish, so no lingerer (exit_lingered=0).
# Under R2SOCK_UPGRADE=never no lingerer is ever made.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
r2s_python
PEER=$(dirname "$0")/exit_peer.py
which=${1:?usage: exit-linger.sh fill|bound|clean}
[[ $which == fill || $which == bound || $which == clean ]] || fail "unknown case '$which'"
port=$(free_port)

# lingerers [client]: pids of the r2s-linger processes of this test; a
# lingerer keeps the argv of the process it came from, which holds our port.
lingerers() {
  local pid args
  for pid in $(pgrep -x r2s-linger || true); do
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
    [[ $args == *"exit_peer.py ${1:-}"*"--port $port "* ]] && echo "$pid"
  done
  return 0
}

# client_lingered: the exit_lingered counter of the client's stats line.
client_lingered() {
  sed -n "s/^r2sock\[$cpid\] stats:.* exit_lingered=\([0-9]*\).*/\1/p" "$STATS"
}

upgrading=false
[[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]] && upgrading=true

# gone_within SECS [client]: wait until no lingerer of this test is left.
gone_within() {
  local i
  for ((i = 0; i < $1 * 20; i++)); do
    [[ -z $(lingerers "${2:-}") ]] && return 0
    sleep 0.05
  done
  [[ -z $(lingerers "${2:-}") ]]
}

# fill_and_exit [CMD...]: the client fills its buffers and exits (run
# through CMD, e.g. env VAR=...); sets wrote, cpid and ling, and asserts a
# lingerer exactly when connections upgrade.
fill_and_exit() {
  run 30 "$@" "$PY" "$PEER" client --port "$port" --mode fill >"$TMP/client.out"
  read -r wrote cpid < <(sed -n 's/^exit_peer client: wrote \([0-9]*\) pid=\([0-9]*\)$/\1 \2/p' "$TMP/client.out")
  [[ -n ${cpid:-} ]] || fail "expected 'exit_peer client: wrote N pid=PID', got: $(cat "$TMP/client.out")"
  ling=$(lingerers client)
  if $upgrading; then
    [[ -n $ling ]] || fail "expected a lingerer for the client's socket while the server has not read it, found none"
  else
    [[ -z $ling ]] || fail "expected no lingerer with R2SOCK_UPGRADE=${R2SOCK_UPGRADE:-never}, found pid $ling"
  fi
}

if [[ $which == bound ]]; then
  start_server srv "$port" "$PY" "$PEER" server --port "$port" --go "$TMP/go"
  fill_and_exit env R2SOCK_LINGER=2
  # 2 s without progress, checked every second: gone well within 30 s.
  gone_within 30 client || fail "lingerer $(lingerers client) of a stalled peer still running 30 s after exit (R2SOCK_LINGER=2)"
  log "client wrote $wrote bytes and exited; its lingerer (${ling:-none}) ended by itself, the server never read"
  stop_server srv TERM 143
  if [[ -n $R2SOCK_LIB ]]; then
    got=$(client_lingered)
    want_lingered=0
    $upgrading && want_lingered=1
    [[ $got == "$want_lingered" ]] ||
      fail "expected the client's stats to say exit_lingered=$want_lingered, saw '${got}' (pid $cpid)"
  fi
  log PASS
  exit 0
fi

if [[ $which == fill ]]; then
  start_server srv "$port" "$PY" "$PEER" server --port "$port" --go "$TMP/go"
  fill_and_exit
  log "client wrote $wrote bytes and exited; lingerer: ${ling:-none}; the server reads now"
  echo "$wrote" >"$TMP/go.tmp" && mv "$TMP/go.tmp" "$TMP/go"
  wait_server srv 40
  grep -qx "exit_peer server: OK bytes=$wrote" "$TMP/srv.log" ||
    fail "expected the server to read all $wrote bytes: $(tail -n 2 "$TMP/srv.log")"
  # The lingerer ends at the server's end of stream; its bound (the kernel's
  # tcp_fin_timeout) is far away, so being gone here is the end-of-stream path.
  gone_within 15 || fail "lingerer(s) $(lingerers | tr '\n' ' ')still running 15 s after the server closed"
  want_lingered=0
  $upgrading && want_lingered=1
else
  start_server srv "$port" "$PY" "$PEER" server --port "$port"
  run 30 "$PY" "$PEER" client --port "$port" --mode clean >"$TMP/client.out"
  cpid=$(sed -n 's/^exit_peer client: wrote 65536, reply OK pid=\([0-9]*\)$/\1/p' "$TMP/client.out")
  [[ -n $cpid ]] || fail "expected the client to get its reply: $(cat "$TMP/client.out")"
  wait_server srv 20
  grep -qx "exit_peer server: OK bytes=65536" "$TMP/srv.log" ||
    fail "expected the server to read 65536 bytes: $(tail -n 2 "$TMP/srv.log")"
  [[ -z $(lingerers client) ]] || fail "expected no lingerer for a client with nothing pending, found pid $(lingerers client)"
  want_lingered=0
fi

check_stats conns=2 bytes=65536 procs=2
if [[ -n $R2SOCK_LIB ]]; then
  got=$(client_lingered)
  [[ $got == "$want_lingered" ]] ||
    fail "expected the client's stats to say exit_lingered=$want_lingered, saw '${got}' (pid $cpid)"
  log "client exit_lingered=$got"
fi
log PASS

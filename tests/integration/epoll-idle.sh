#!/usr/bin/env bash
# An epoll server whose carried connections wait idle sleeps until
# something happens (tests/integration/epoll_idle_peer.py).
#   usage: epoll-idle.sh idle|idle-et|room|talker|burst
#   idle:   64 connections, each with one request and its response, then
#           idle for IDLE s, then ROUNDS more requests each. Over the idle
#           window the server's shim must sleep without a slice: its
#           waits_slice_expired, read live with r2sock-stat, must not grow
#           (the library before this sleep woke every 100 ms and looked at
#           every connection: 14 slices in a window of 1.5 s), and it must
#           have counted such sleeps (waits_unsliced). Idle that long, each
#           connection is left to the kernel (links_quiet: the waits no
#           longer look at it) until its next request wakes it. Every
#           request after the window must be answered: a wake-up lost now
#           is a hang, which the bound of the run turns into a failure.
#   idle-et: as idle, with the server's connections registered as nginx
#           registers them (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET): the room
#           to write, reported once, does not keep a link from the kernel.
#   room:   one connection, registered so; after a first request and its
#           response, the server answers a second request with an
#           8 MiB reply, filling the connection by nonblocking sends while the client reads
#           nothing for 2.5 s, and waits for room in epoll waits of
#           0.1 s: idle past a second, the link is left to the kernel
#           (links_quiet >= 1) while the server waits to write. The room
#           the client's reading then makes must wake it, or the server
#           waits for good; the client checks every byte.
#   burst:  128 connections as in idle, then three bursts, each after
#           1.3 s of quiet and one request with a pause behind it (in
#           which the server's wait leaves the other 127 to the kernel):
#           every other connection sends a request at once, and only then
#           are the responses read. The quiet links wake many at once and
#           while others are being read: every response must come.
#   talker: the server's epoll thread reads the first connection's
#           requests (200, 2 ms apart) while a second thread writes
#           32 MiB on that connection with blocking sends, which read the
#           connection's frames off the socket, at times the doorbell the
#           sleeping epoll wait asked for: the shim then wakes that wait
#           (a poke, counted and logged). Those requests are answered once,
#           after all came, and nothing else happens meanwhile: a request
#           the server missed is a hang. All must arrive and the 32 MiB be
#           byte-exact. (Whether a doorbell is taken so is a matter of
#           timing, and the talker's own progress wakes the epoll wait as
#           well, so the test does not fail for sure without pokes.)
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/epoll_idle_peer.py
STAT=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/r2sock-stat
IDLE=1.5
ROUNDS=3 TALK=$((32 << 20)) TALK_ROUNDS=200 BURSTS=3 # as in epoll_idle_peer.py
mode=${1:?usage: epoll-idle.sh idle|idle-et|room|talker|burst}
srv_opts=()
case $mode in
  idle) N=64 opts=() ;;
  talker) N=2 opts=(--talker) ;;
  burst) N=128 opts=(--burst) ;;
  idle-et) N=64 opts=() srv_opts=(--et) ;;
  room) N=1 opts=(--room) REPLY=$((8 << 20)) ;; # as in epoll_idle_peer.py
  *) fail "unknown mode '$mode'" ;;
esac
rings=0
[[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]] && rings=1
if ((rings)); then
  [[ -x $STAT ]] || fail "r2sock-stat not built: expected it at $STAT (set R2SOCK_BUILD to the build dir)"
fi
# Each connection's first request and response may cross before its
# switch, on TCP: the share of bytes is no measure here. Every end must
# have been carried by its rings instead (asserted below).
expect=${R2SOCK_EXPECT_PATH:-}
R2SOCK_EXPECT_PATH=

# live NAME PID: counter NAME of PID's shim, read from its live segment.
live() {
  local v
  v=$("$STAT" --json -p "$2" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["processes"][0]["counters"][sys.argv[1]])' "$1") ||
    fail "r2sock-stat --json -p $2 gave no counter $1"
  echo "$v"
}

port=$(free_port)
start_server_at server "$port" "$TMP/server.stats" "$PY" "$PEER" server --port "$port" --conns "$N" "${opts[@]}" \
  "${srv_opts[@]}"
spid=$(child_of "$(server_pid server)")
shim_at "$TMP/client.stats"
# The client runs until told to go on: in the background, registered with
# lib.sh so that a failure stops its process group.
timeout -k 5 120 "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --conns "$N" --ready "$TMP/ready" \
  --go "$TMP/go" "${opts[@]}" </dev/null >"$TMP/client.out" 2>&1 &
R2S_SERVER_PID[client]=$!
deadline=$((SECONDS + 60))
until [[ -e $TMP/ready ]]; do
  alive "${R2S_SERVER_PID[client]}" || fail "the client exited before it was ready: $(tail -n 3 "$TMP/client.out")"
  ((SECONDS < deadline)) || fail "the client was not ready after 60 s"
  sleep 0.05
done
if [[ $mode == idle* ]] && ((rings)); then
  # A link that switched less than a second ago may still read its peer's
  # bytes ahead, and a wait over it sleeps in slices meanwhile (wait.h):
  # the window starts after that second.
  sleep 1.2
  before=$(live waits_slice_expired "$spid")
  sleep "$IDLE"
  after=$(live waits_slice_expired "$spid")
  log "server: waits_slice_expired $before -> $after over $IDLE s idle"
  ((after == before)) ||
    fail "the server's epoll wait woke $((after - before)) times in $IDLE s with nothing to do (waits_slice_expired)"
fi
touch "$TMP/go"
wait_server client 120
wait_server server 60
if [[ $mode == idle* ]]; then
  want_req=$((N * (1 + ROUNDS))) bytes=$((N * (1 + ROUNDS) * 32))
elif [[ $mode == burst ]]; then
  want_req=$((N * (1 + BURSTS))) bytes=$((N * (1 + BURSTS) * 32))
elif [[ $mode == room ]]; then
  want_req=2 bytes=$((48 + REPLY))
else
  want_req=$((N + (N - 1) * ROUNDS + TALK_ROUNDS)) bytes=$((TALK + N * 32 + (N - 1) * ROUNDS * 32 + TALK_ROUNDS * 16))
fi
grep -q "^epoll_idle_peer client: OK conns=$N requests=$want_req " "$TMP/client.out" ||
  fail "the client did not report $want_req requests: $(tail -n 3 "$TMP/client.out")"
grep -q "^epoll_idle_peer server: OK conns=$N requests=$want_req " "$TMP/server.log" ||
  fail "the server did not answer $want_req requests: $(tail -n 3 "$TMP/server.log")"
if [[ $mode == talker ]]; then
  grep -q "^epoll_idle_peer client: OK .* heard=$TALK\$" "$TMP/client.out" ||
    fail "the client did not hear the server's $TALK bytes: $(tail -n 3 "$TMP/client.out")"
elif [[ $mode == room ]]; then
  grep -q "^epoll_idle_peer client: OK .* heard=$REPLY\$" "$TMP/client.out" ||
    fail "the client did not hear the server's $REPLY bytes: $(tail -n 3 "$TMP/client.out")"
fi
cat "$TMP/server.stats" "$TMP/client.stats" >>"$STATS"
if [[ $mode == idle* ]] && ((rings)); then
  unsliced=$(STATS=$TMP/server.stats stats_sum waits_unsliced)
  ((unsliced > 0)) || fail "the server's shim never slept without a slice (waits_unsliced=0)"
  log "server: waits_unsliced=$unsliced"
fi
if [[ $mode != talker ]] && ((rings)); then
  # Idle for longer than a second, connections are left to the kernel
  # (links_quiet) by a wait that arms. After the window the client pauses
  # behind its first request: the server's wait then arms and leaves the
  # other N - 1 to the kernel; each woke for its next request (above).
  # So does each pause before a burst.
  quiet=$(STATS=$TMP/server.stats stats_sum links_quiet)
  want_quiet=$((N - 1))
  [[ $mode == burst ]] && want_quiet=$((BURSTS * (N - 1)))
  [[ $mode == room ]] && want_quiet=1
  ((quiet >= want_quiet)) ||
    fail "the server's epoll set left idle connections to the kernel $quiet times (links_quiet; $want_quiet expected)"
  log "server: links_quiet=$quiet"
fi
if ((rings)); then
  log "server: pokes=$(STATS=$TMP/server.stats stats_sum pokes)"
  if [[ -n $expect && $expect != tcp ]]; then
    on=$(stats_sum "conn_$expect")
    ((on == 2 * N)) || fail "expected all $((2 * N)) connection ends on $expect, saw conn_$expect=$on"
  fi
fi
check_stats conns=$((2 * N)) bytes="$bytes" procs=2
log PASS

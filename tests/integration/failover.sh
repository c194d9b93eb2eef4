#!/usr/bin/env bash
# Lossless failover to TCP: a connection whose ring channel fails under it
# goes on over TCP, both directions, with nothing lost or duplicated and no
# error seen by the application (docs/protocol.md, "Failover"). The
# failure is made on purpose with R2SOCK_FAIL_AFTER=SIZE: in a process
# that sets it, each connection whose send direction is in a ring declares
# its ring channel failed once it has put SIZE bytes into the peer's ring;
# only one end needs it, the peer follows. Both ends are stream_check
# (every byte of every connection verified where it lands), both under the
# shim with R2SOCK_UPGRADE=now on one host: shared memory first, then TCP.
#   usage: failover.sh client|server|both|epoll-et|conns|conns-poll|reply|
#                      reply-bidir|halfclose|tail
#   client, server, both: 8 MiB each way at once (--bidir, blocking, one
#           thread per direction), FAIL_AFTER=300K on that end (both: on
#           each end, so that both declare the failure at about the same
#           time and their declarations cross)
#   epoll-et: as client, both ends non-blocking in one edge-triggered
#           epoll loop
#   conns:  4 connections of 16 MiB each way, blocking, FAIL_AFTER on the
#           server. (A direction enters the ring once it has read the
#           peer's handshake, which may lie behind megabytes the peer wrote
#           before its switch while four connections start at once: each
#           connection's FAIL_AFTER end must still reach its ring.)
#   conns-poll: the same in level-triggered poll loops, FAIL_AFTER on the
#           client
#   reply:  the client sends 64 KiB, then only reads a 16 MiB reply; the
#           server, which starts its reply once it has the whole request,
#           declares the failure (FAIL_AFTER on the server) while the
#           client's application only reads: the client's shim must take
#           its part in the failover from inside its reads
#   reply-bidir: the client sends 256 KiB at once with the reply coming
#           (--bidir), then only reads the 16 MiB reply; FAIL_AFTER on the
#           server. When the server declares, the client's last bytes may
#           still lie unread in the server's ring: what of them is to be
#           sent again over TCP only the client's shim can send, while its
#           application only reads
#   halfclose: the client sends 4 MiB, shuts down its sending side
#           (shutdown SHUT_WR; the server reads to EOF) and reads a 16 MiB
#           reply; FAIL_AFTER on the server: the failover comes after the
#           client's FIN, when its TCP side can carry nothing more, and
#           nothing of the client may be lost
#   tail:   the client sends 4 MiB, the server replies 1 MiB and its
#           16-byte trailer, both ends in edge-triggered epoll loops; the
#           server's FAIL_AFTER is the length of its reply, so its ring
#           fails once the reply is in, at the latest at the write of the
#           trailer, its last: whatever it must send again over TCP, its
#           shim sends after the application's last write, while the
#           application closes. (The reply goes through the ring from its
#           first byte: it starts once the whole request, behind the
#           client's handshake, is in.)
# Asserted for each case: both ends exit 0 and report every connection OK
# (stream_check verified every byte, in order, and closed every socket);
# each end's stats count every connection in conn_shm (it went into shared
# memory first) and in failovers, once per connection on each end
# (failovers = N); every end run with FAIL_AFTER sent at least half its
# payload over TCP (bytes_tcp_tx; tail: the server, its trailer), more
# than any connection sends over TCP before its switch; no /dev/shm
# segment is left. The tcp variant skips: under R2SOCK_UPGRADE=never
# nothing is ever in a ring.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: failover.sh client|server|both|epoll-et|conns|conns-poll|reply|reply-bidir|halfclose|tail}
needs_rings "failover is the shim's business: nothing to check without it" "nothing is ever in a ring, so no ring can fail"

FAIL=(env R2SOCK_FAIL_AFTER=300K)
# Per connection: C2S bytes from the client, S2C from the server.
N=1 sc_mode=block srv_env=() cli_env=() flags=(--bidir) C2S=$((8 << 20)) S2C=$((8 << 20))
case $mode in
  client) cli_env=("${FAIL[@]}") ;;
  server) srv_env=("${FAIL[@]}") ;;
  both) srv_env=("${FAIL[@]}") cli_env=("${FAIL[@]}") ;;
  epoll-et) sc_mode=nonblock-epoll-et cli_env=("${FAIL[@]}") ;;
  conns) N=4 C2S=$((16 << 20)) S2C=$((16 << 20)) srv_env=("${FAIL[@]}") ;;
  conns-poll) N=4 sc_mode=poll C2S=$((16 << 20)) S2C=$((16 << 20)) cli_env=("${FAIL[@]}") ;;
  reply) flags=() C2S=$((64 << 10)) S2C=$((16 << 20)) srv_env=("${FAIL[@]}") ;;
  reply-bidir) C2S=$((256 << 10)) S2C=$((16 << 20)) srv_env=("${FAIL[@]}") ;;
  halfclose) flags=(--halfclose) C2S=$((4 << 20)) S2C=$((16 << 20)) srv_env=("${FAIL[@]}") ;;
  tail)
    sc_mode=nonblock-epoll-et flags=() C2S=$((4 << 20)) S2C=$((1 << 20))
    srv_env=(env "R2SOCK_FAIL_AFTER=$S2C")
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
# An end run with FAIL_AFTER puts at most that and one write more into the
# ring (a peer's FAILOVER can only stop it sooner): the rest of what it
# sends, here at least half, must go over TCP. (Its peer may fill a wide
# ring before the FAILOVER reaches it, and the bytes it then sends again
# over TCP stay counted where they were first put: nothing is asserted of
# it.) tail: the server's trailer, after its last ring byte.
tcp_min=()
((${#cli_env[@]})) && tcp_min+=(client $((N * C2S / 2)))
((${#srv_env[@]})) && tcp_min+=(server $((N * S2C / 2)))
[[ $mode == tail ]] && tcp_min=(server 16)

shm_snapshot
sc_server "$TMP/server.stats" "${srv_env[@]}" -- --conns "$N" --mode "$sc_mode" --timeout 50
shim_at "$TMP/client.stats"
crc=0
timeout -k 5 60 "${cli_env[@]}" "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$SC_PORT" --conns "$N" \
  --mode "$sc_mode" "${flags[@]}" --bytes "$C2S" --reply-bytes "$S2C" --timeout 50 >"$TMP/client.log" 2>&1 || crc=$?
src=0
wait "$SC_PID" || src=$?
LIVE=()
((crc == 0 && src == 0)) ||
  fail "expected both ends to verify every byte and exit 0, got client $crc, server $src: $(cat "$TMP/client.log" "$TMP/server.log")"
for end in client server; do
  grep -q "^stream_check $end: OK mode=$sc_mode conns=$N/$N " "$TMP/$end.log" ||
    fail "the $end did not report $N connection(s) OK: $(cat "$TMP/$end.log")"
  log "$end: $(grep "^stream_check $end:" "$TMP/$end.log")"
done

for end in client server; do
  f=$TMP/$end.stats
  [[ -s $f ]] || fail "the $end wrote no stats line"
  shm=$(STATS=$f stats_sum conn_shm)
  ((shm == N)) ||
    fail "expected the $end's $N connection(s) in shared memory first (conn_shm=$N), saw conn_shm=$shm: $(cat "$f")"
  grep -q " failovers=" "$f" || fail "the $end's stats have no counter failovers: $(cat "$f")"
  fo=$(STATS=$f stats_sum failovers)
  ((fo == N)) ||
    fail "expected the $end to count each of its $N connection(s) once in failovers, saw failovers=$fo: $(cat "$f")"
  log "$end: conn_shm=$shm failovers=$fo bytes_shm_tx=$(STATS=$f stats_sum bytes_shm_tx)" \
    "bytes_tcp_tx=$(STATS=$f stats_sum bytes_tcp_tx)"
done
set -- "${tcp_min[@]}"
while (($#)); do
  tcp=$(STATS=$TMP/$1.stats stats_sum bytes_tcp_tx)
  ((tcp >= $2)) ||
    fail "expected the $1 to send >= $2 bytes over TCP after the failover, saw bytes_tcp_tx=$tcp: $(cat "$TMP/$1.stats")"
  shift 2
done

cat "$TMP/client.stats" "$TMP/server.stats" >>"$STATS"
check_stats conns=$((2 * N)) bytes=$((N * (C2S + S2C))) procs=2
shm_check_leaks
log PASS

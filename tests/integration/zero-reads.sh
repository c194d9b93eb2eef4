#!/usr/bin/env bash
# Reads of no bytes on a carried connection: both ends of a checked stream
# (tests/progs stream_check --zero-reads) slip one before each of their
# reads: read and readv with no iovec or empty ones, recv, recvfrom and
# recvmsg of no bytes, MSG_PEEK and MSG_DONTWAIT of none, recvmmsg of one
# empty message. Each must answer as Linux does (0, EAGAIN when nonblocking
# and nothing is queued, recvmmsg 1) and take no byte; every byte of both
# directions must arrive, with no premature end of the stream.
#   usage: zero-reads.sh ring|frames
#   ring:   both ends as this user: the connection upgrades (the shm
#           variant asserts the bulk went through shared memory). Before
#           the fix an empty read in front of RING set the link's end of
#           stream, and the ring's first empty moment then ended it early
#           ("premature EOF in the data").
#   frames: one end's send direction stays on DATA frames over TCP
#           (mixed-lib.sh, FRAMER: it cannot map its peer's ring), where
#           empty reads fall inside frames. Each I/O style runs twice, the
#           server and then the client the framer, so that each end reads
#           frames once (16 MiB each way); the framer's stats and debug log
#           must say so. Needs the shim with rings, without a sanitizer
#           runtime (skipped otherwise).
# One stream per I/O style of stream_check (blocking with a sender thread,
# poll, edge-triggered epoll), both directions at once.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: zero-reads.sh ring|frames}
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
BYTES=32M
case $mode in
  ring) ;;
  frames)
    needs_rings "nothing to check without the shim" "no ring is ever offered, so no DATA frame is sent"
    needs_lasting_frames
    BYTES=16M
    ;;
  *) fail "unknown mode '$mode'" ;;
esac

shm_snapshot
n=0
runs=(block poll nonblock-epoll-et)
# frames: RUN:END, END the framer.
[[ $mode == frames ]] && runs=(block:server block:client poll:server poll:client
  nonblock-epoll-et:server nonblock-epoll-et:client)
for r in "${runs[@]}"; do
  io=${r%%:*} as_server=() as_client=()
  if [[ $r == *:server ]]; then
    as_server=("${FRAMER[@]}") as_client=("${FRAMED_TO[@]}")
  elif [[ $r == *:client ]]; then
    as_server=("${FRAMED_TO[@]}") as_client=("${FRAMER[@]}")
  fi
  [[ $r == *:* ]] && io=$io-${r#*:}
  port=$(free_port)
  n=$((n + 1))
  start_server_at "sc-$io" "$port" "$TMP/server-$io.stats" "${as_server[@]}" "$SC" server --host 127.0.0.1 \
    --port "$port" --mode "${r%%:*}" --timeout 50
  run_to_at "$TMP/client-$io.out" 60 "$TMP/client-$io.stats" "${as_client[@]}" "$SC" client --host 127.0.0.1 \
    --port "$port" --mode "${r%%:*}" --bytes "$BYTES" --bidir --halfclose --zero-reads --seed "$((40 + n))" --timeout 50
  wait_server "sc-$io" 20
  grep -q "stream_check client: OK .*flags=halfclose,bidir,zero-reads" "$TMP/client-$io.out" ||
    fail "$io: the client did not report OK with zero-reads: $(cat "$TMP/client-$io.out")"
  grep -q "stream_check server: OK .*flags=halfclose,bidir,zero-reads" "$TMP/sc-$io.log" ||
    fail "$io: the server did not report OK with zero-reads: $(cat "$TMP/sc-$io.log")"
  log "$io: $(grep -h 'stream_check client' "$TMP/client-$io.out")"
  if [[ $mode == frames ]]; then
    if [[ ${r#*:} == server ]]; then
      check_frames_kept "$io" "$TMP/server-$io.stats" "$TMP/sc-$io.log" "$TMP/client-$io.stats"
    else
      check_frames_kept "$io" "$TMP/client-$io.stats" "$TMP/client-$io.out" "$TMP/server-$io.stats"
    fi
  fi
  [[ -z $R2SOCK_LIB ]] || cat "$TMP/server-$io.stats" "$TMP/client-$io.stats" >>"$STATS"
done
bytes=$(numfmt --from=iec "$BYTES")
check_stats conns=$((2 * n)) bulk=$((2 * n)) bytes=$((2 * n * bytes)) procs=$((2 * n))
shm_check_leaks
log PASS

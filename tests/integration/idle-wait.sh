#!/usr/bin/env bash
# A blocked call sleeps while its peer is idle, on events the link does not
# own (tests/integration/idle_peer.py). Each blocked end must use under a
# quarter of its wait in CPU, and under the shim sleep in the kernel
# (waits_sleep > 0). Before the fix such a wait took "not mine" for "look
# again" and polled the socket at full CPU (waits_sleep stayed 0). A
# sleeping end uses almost none, whatever the load, so the CPU bound cannot
# fail a correct shim; a busy one could pass it only on a machine so loaded
# that it got under a quarter of a core, hence waits_sleep as well.
#   usage: idle-wait.sh read|write-frames
#   read:  a server waiting for its client's request (its link still in
#          PROBE) and a client waiting for the reply each block in recv()
#          for PAUSE seconds. Old library: the server used 0.42 s of CPU
#          in 1.5 s.
#   write-frames: the server's send direction stays on DATA frames over
#          TCP (mixed-lib.sh, FRAMER: it cannot map the client's ring; its
#          stats and debug log say so). The server writes 32 MiB with one
#          blocking sendall while the client sleeps PAUSE seconds before
#          reading, so the writer blocks on a full socket. Old library:
#          1.88 s of CPU in a 3.1 s wait.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/idle_peer.py
PAUSE=1.5
mode=${1:?usage: idle-wait.sh read|write-frames}
as_server=() as_client=() peer_opts=() ends=(server client)
case $mode in
  read) ;;
  write-frames)
    needs_rings "nothing to check without the shim" "no ring is ever offered, so no DATA frame is sent"
    needs_lasting_frames
    as_server=("${FRAMER[@]}") as_client=("${FRAMED_TO[@]}")
    peer_opts=(--write $((32 << 20)))
    ends=(server)
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
port=$(free_port)
start_server_at server "$port" "$TMP/server.stats" "${as_server[@]}" "$PY" "$PEER" server --port "$port" \
  --pause "$PAUSE" "${peer_opts[@]}"
run_to_at "$TMP/client.out" 60 "$TMP/client.stats" "${as_client[@]}" "$PY" "$PEER" client --port "$port" \
  --pause "$PAUSE" "${peer_opts[@]}"
wait_server server 30
if [[ $mode == write-frames ]]; then
  grep -q "^idle_peer client: received=$((32 << 20))\$" "$TMP/client.out" ||
    fail "the client did not receive the server's 32 MiB: $(tail -n 3 "$TMP/client.out")"
  check_frames_kept write-frames "$TMP/server.stats" "$TMP/server.log" "$TMP/client.stats"
fi
for end in "${ends[@]}"; do
  [[ $end == server ]] && out=$TMP/server.log || out=$TMP/client.out
  line=$(grep "^idle_peer $end: .*waited=" "$out" || true)
  [[ -n $line ]] || fail "the $end printed no wait: $(tail -n 3 "$out")"
  log "$line"
  read -r waited used < <(sed -E 's/.*waited=([0-9.]+) cpu=([0-9.]+)/\1 \2/' <<<"$line")
  awk -v w="$waited" -v p="$PAUSE" 'BEGIN { exit !(w >= p / 2) }' ||
    fail "the $end's call returned after $waited s: it should have waited for its peer's pause of $PAUSE s"
  awk -v w="$waited" -v c="$used" 'BEGIN { exit !(c < w / 4) }' ||
    fail "the $end used $used s of CPU in a call blocked for $waited s: it polled instead of sleeping"
  if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]]; then
    sleeps=$(STATS=$TMP/$end.stats stats_sum waits_sleep)
    ((sleeps > 0)) || fail "the $end's shim never slept in the kernel (waits_sleep=0) during a $waited s wait"
    log "$end: waits_sleep=$sleeps"
  fi
done
[[ -z $R2SOCK_LIB ]] || cat "$TMP/server.stats" "$TMP/client.stats" >>"$STATS"
if [[ $mode == write-frames ]]; then
  check_stats conns=2 bytes=$((32 << 20)) procs=2
else
  check_stats conns=2 bytes=128 procs=2
fi
log PASS

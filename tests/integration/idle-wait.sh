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
#   write-frames: the client may offer only RDMA, on a device that does
#          not exist, so it makes no offer and its HANDSHAKE never comes:
#          the server, which switched, sends all its bytes in DATA frames
#          over TCP (its debug log says it switched; the stats, that
#          neither end reached a ring and the client had no device). (Until
#          2026-11-27 the client ran as nobody for this; since then such
#          ends go back to plain TCP.) The server writes 32 MiB with one
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
    as_server=(env R2SOCK_LOG=debug)
    as_client=(env R2SOCK_TRANSPORT=rdma R2SOCK_DEVICE=r2s-no-such-device)
    peer_opts=(--write $((32 << 20)))
    ends=(server)
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
SHIM=()
port=$(free_port)
shim_at "$TMP/server.stats"
start_server server "$port" "${as_server[@]}" "${SHIM_AT[@]}" "$PY" "$PEER" server --port "$port" --pause "$PAUSE" "${peer_opts[@]}"
shim_at "$TMP/client.stats"
run_to "$TMP/client.out" 60 "${as_client[@]}" "${SHIM_AT[@]}" "$PY" "$PEER" client --port "$port" --pause "$PAUSE" \
  "${peer_opts[@]}"
wait_server server 30
if [[ $mode == write-frames ]]; then
  grep -q "^idle_peer client: received=$((32 << 20))\$" "$TMP/client.out" ||
    fail "the client did not receive the server's 32 MiB: $(tail -n 3 "$TMP/client.out")"
  for end in server client; do
    shm=$(STATS=$TMP/$end.stats stats_sum conn_shm)
    ((shm == 0)) || fail "the $end should have no connection on shared memory, saw conn_shm=$shm"
  done
  nd=$(STATS=$TMP/client.stats stats_sum tcp_no_device)
  ((nd == 1)) || fail "the client should count its connection in tcp_no_device, saw $nd"
  grep -q "debug: switched the send direction" "$TMP/server.log" ||
    fail "the server never switched its send direction: its bytes were not in DATA frames"
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

#!/usr/bin/env bash
# A stream on a contended CPU: both ends and BUSY spinning processes share
# CPU 0 (taskset), so more than twice as many threads are runnable as the
# ends have CPUs. Each end's shim then makes its receive ring wide
# (src/cpu_busy.h, transport/shm.c offer_size): the bytes in flight between
# the writer's and the reader's turns on the CPU. B bytes each way
# (stream_check --bidir), checked byte for byte; in the shm variant each end
# must count its connection on shm and its ring in rings_wide. Until the
# switch the stream crosses TCP, up to what the kernel's buffers take while
# the other end waits for the CPU (4.1 MiB each way seen): B makes
# that a small part of the stream, which the bulk check (>= 90% on shm)
# needs. What is not asserted: the speed (kernel TCP's and the shim's, with and without wide
# rings, are in scripts/bench-adverse).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
need taskset
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
B=$((128 << 20)) BUSY=3

# The spinners run under `timeout` like the servers (bounded, each its own
# process group) and are listed with them, so that a failed test's cleanup
# stops them too; stop_busy stops them while they are still ours.
for i in $(seq 1 $BUSY); do
  timeout -k 5 "$R2S_SERVER_LIFETIME" taskset -c 0 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
  R2S_SERVER_PID[busy$i]=$!
done
stop_busy() {
  local i pid
  for i in $(seq 1 $BUSY); do
    pid=${R2S_SERVER_PID[busy$i]}
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "R2S_SERVER_PID[busy$i]"
  done
}

port=$(free_port)
start_server sc "$port" taskset -c 0 "$SC" server --host 127.0.0.1 --port "$port" --once --timeout 90
run 120 taskset -c 0 "$SC" client --host 127.0.0.1 --port "$port" --bytes $B --bidir --seed 11 \
  --timeout 90 >"$TMP/client.out"
wait_server sc 30
stop_busy
grep -q "stream_check client: OK" "$TMP/client.out" || fail "the client did not verify: $(cat "$TMP/client.out")"
grep -q "stream_check server: OK" "$TMP/sc.log" || fail "the server did not verify: $(tail -n 3 "$TMP/sc.log")"
check_stats conns=2 bulk=2 bytes=$((2 * B)) procs=2
if [[ ${R2SOCK_EXPECT_PATH:-} == shm ]]; then
  wide=$(stats_sum rings_wide)
  ((wide == 2)) || fail "expected both ends to make a wide ring on a contended CPU (rings_wide=2), saw rings_wide=$wide"
  log "both ends made wide rings"
fi
log PASS

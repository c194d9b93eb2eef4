#!/bin/bash
# rxe.faults, inside ONE guest: kill -9 either end of an RDMA-upgraded
# stream at random points, R2SOCK_FAULT_TRIALS times (default 50).
#   Each trial: stream_check server and client under the shim with
#   R2SOCK_TRANSPORT=rdma, a random transfer size (1 to 64 MiB), and after a
#   random delay after the connection is established (0 to 2 s: during
#   the hello/handshake, mid-transfer, or around the close) one end, chosen at random, is killed with SIGKILL.
#   The survivor must end by itself within 10 s (no hang): with success if
#   the transfer had completed, else with stream_check's failure status 1
#   (EOF or ECONNRESET). Its time to notice is recorded; the median and the
#   maximum are printed. No shared-memory ring may be left in /dev/shm.
# Then, in the same boot, the lying peer over RDMA (guest-liar.sh: one
# connection per lie next to an honest one, about a minute).
# Skipped when R2SOCK_LIB is empty.
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"
IP=$MY_IP
SC=${R2SOCK_BUILD:-}/tests/progs/stream_check
TRIALS=${R2SOCK_FAULT_TRIALS:-50}
if [ -z "${R2SOCK_LIB:-}" ]; then
  skip "fault trials" "R2SOCK_LIB is empty (libr2sock.so not built)"
  finish
fi
RDMA_ENV="LD_PRELOAD=$R2SOCK_LIB R2SOCK_UPGRADE=now R2SOCK_TRANSPORT=rdma"
exec {tick}<> <(:)
RANDOM=${R2SOCK_FAULT_SEED:-4242}
times=() survived=0 hung=0 completed=0 bad=0 slow=0
for ((i = 1; i <= TRIALS; i++)); do
  port=$((7100 + i % 50))
  mb=$((1 + RANDOM % 64)) delay_ms=$((RANDOM % 2000)) victim=$((RANDOM % 2))
  env $RDMA_ENV "$SC" server --host "$IP" --port $port --once --timeout 30 > "$LOGDIR/trial.server.log" 2>&1 &
  spid=$!
  wait_listen $port 20 "$spid" || { fail "trial $i: no server"; kill -9 $spid 2>/dev/null; continue; }
  env $RDMA_ENV "$SC" client --host "$IP" --port $port --bytes ${mb}M --bidir --timeout 30 \
    > "$LOGDIR/trial.client.log" 2>&1 &
  cpid=$!
  # the delay counts from the connection's establishment: killing a client
  # that has not connected yet tests nothing (the server rightly waits). A
  # short transfer may also be over already: any client-side socket of the
  # port (in whatever state), or a client that has ended, will do.
  wait_for 20 eval "[ -n \"\$(ss -Htan '( dport = :$port )')\" ] || ! kill -0 $cpid" ||
    { fail "trial $i: no connection within 20 s"; kill -9 $cpid $spid 2>/dev/null; wait $cpid $spid 2>/dev/null; continue; }
  read -rt "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))" -u "$tick" _
  if [ $victim = 0 ]; then kill -9 $cpid 2>/dev/null; dead=client; other=$spid; else kill -9 $spid 2>/dev/null; dead=server; other=$cpid; fi
  t0=$EPOCHREALTIME
  snap=0
  while kill -0 $other 2>/dev/null && (( ${EPOCHREALTIME%.*} - ${t0%.*} < 10 )); do
    read -rt 0.005 -u "$tick" _
    if [ $snap = 0 ] && (( ${EPOCHREALTIME%.*} - ${t0%.*} >= 5 )); then
      snap=1  # still there after 5 s: where is it?
      for t in /proc/$other/task/*; do
        say "    5 s: task ${t##*/}: $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
        sed 's/^/        /' "$t/stack" 2>/dev/null | head -n 12
      done
    fi
  done
  t1=$EPOCHREALTIME
  if kill -0 $other 2>/dev/null; then
    hung=$((hung + 1))
    fail "trial $i: the $([ $dead = client ] && echo server || echo client) still runs 10 s after the $dead was killed (${mb} MiB, ${delay_ms} ms)"
    # where it waits, for whoever reads the log
    for t in /proc/$other/task/*; do
      say "    task ${t##*/}: $(cut -d' ' -f3 "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
      sed 's/^/        /' "$t/stack" 2>/dev/null | head -n 12
    done
    command -v gdb > /dev/null && timeout 60 gdb -p $other -batch -ex "thread apply all bt" 2>&1 |
      grep -E '^#|^Thread' | cut -c1-150 | sed 's/^/    /'
    sed 's/^/    /' "$LOGDIR/trial.server.log" "$LOGDIR/trial.client.log" | tail -n 8
    kill -9 $other 2>/dev/null
  fi
  wait $other 2>/dev/null; rc=$?
  wait $cpid $spid 2>/dev/null
  case $rc in
    0) completed=$((completed + 1)); survived=$((survived + 1)) ;;
    1) survived=$((survived + 1)) ;;
    137) ;;  # counted as hung above
    *) bad=$((bad + 1)); fail "trial $i: the survivor exited $rc (expected 0 or 1)"
       sed 's/^/    /' "$LOGDIR/trial.server.log" "$LOGDIR/trial.client.log" | tail -n 6 ;;
  esac
  took=$(echo "$t1 - $t0" | bc)
  times+=("$took")
  # a survivor should end within 1 s: name the trials past it, for whoever looks
  # for the cause (the test itself fails only on a hang or a bad exit)
  if (( $(echo "$took > 1" | bc) )); then
    slow=$((slow + 1))
    say "  trial $i: the surviving $([ $dead = client ] && echo server || echo client) took ${took} s to end (exit $rc; ${mb} MiB, $dead killed after ${delay_ms} ms)"
    sed 's/^/    /' "$LOGDIR/trial.$([ $dead = client ] && echo server || echo client).log" | tail -n 6
  fi
done
sorted=$(printf '%s\n' "${times[@]}" | sort -g)
median=$(echo "$sorted" | sed -n "$(( (${#times[@]} + 1) / 2 ))p")
max=$(echo "$sorted" | tail -n 1)
say "fault trials: $TRIALS run, $survived survivors ended by themselves ($completed had completed), $hung hung, $bad bad exits"
say "time for the survivor to end after the kill: median ${median} s, max ${max} s, $slow over 1 s"
step "no shared-memory ring left behind" bash -c '! ls /dev/shm/r2s-[0-9]* 2>/dev/null'
step "every survivor ended by itself" test "$hung" = 0 -a "$bad" = 0
# shellcheck source=tests/rxe/guest-liar.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-liar.sh"
finish

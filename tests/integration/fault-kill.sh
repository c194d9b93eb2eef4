#!/usr/bin/env bash
# A peer dies (kill -9), both ends under the shim: the survivor must notice
# promptly, through EOF, ECONNRESET or EPIPE, whatever path the connection
# had taken (kernel TCP today; shared memory later, where a dead producer or
# consumer shows only through the TCP control socket).
#   usage: fault-kill.sh client|server|early
#   client: kill the client mid-transfer (0.2-0.5 s into a stream in both
#           directions that would last minutes), R2S_KILL_RUNS times (5)
#   server: the same, killing the server
#   early:  kill within the first 50 ms of the connection, right after connect
#           (while a shim would be exchanging hellos and handshakes): the
#           client R2S_KILL_RUNS times and the server R2S_KILL_RUNS times
# Each run alternates the I/O style (blocking; epoll-et server with a poll
# client). For each run the survivor (stream_check) must
#   - exit with status 1 (failure reported), not 0 and not 3 (its own
#     watchdog, set far beyond the bound so that a hang cannot pass as a
#     detection),
#   - name a reset, a broken pipe or a premature EOF as its error,
#   - exit within R2S_SURVIVOR_BOUND_MS (default 2000 ms; the requirement is
#     1 s, these machines are noisy) of the kill: a liveness bound, measured
#     from just before kill(2) to the survivor's exit and printed per run,
#   - write its stats line (conn_seen >= 1).
# No /dev/shm/r2s-* segment may survive the test, the killed end's included:
# the survivor (or the protocol's early unlink) must take care of it.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"

mode=${1:?usage: fault-kill.sh client|server|early}
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
BOUND_MS=${R2S_SURVIVOR_BOUND_MS:-2000}
RUNS=${R2S_KILL_RUNS:-5}
[[ $BOUND_MS =~ ^[0-9]+$ && $RUNS =~ ^[0-9]+$ ]] || fail "R2S_SURVIVOR_BOUND_MS and R2S_KILL_RUNS must be integers"
((RUNS >= 1 && RUNS <= 50)) || fail "R2S_KILL_RUNS must be 1..50, not $RUNS"
# stream_check's own watchdog: far beyond the bound, so that its firing is
# told apart from a detection (status 3 and a TIMEOUT line).
WATCHDOG=$((BOUND_MS / 1000 + 25))
# How long after the kill the test waits before calling the survivor hung.
GIVE_UP_MS=$((BOUND_MS + 5000))
STREAM_BYTES=64G # minutes of transfer: the kill always lands mid-stream

# Every program this test starts runs in a wrapper subshell that records its
# pid (NAME.pid) and, when it ends, its status and exit time (NAME.exit:
# "STATUS MICROSECONDS"); its output goes to NAME.log.
fk_cleanup() {
  local rc=$? f name
  for f in "$TMP"/*.pid; do
    [[ -s $f ]] || continue
    name=${f%.pid}
    [[ -e $name.exit ]] || kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
  # r2s_cleanup reads the status from $?; set -e would end this trap at the
  # (exit) that sets it.
  set +e
  trap - ERR
  (exit "$rc")
  r2s_cleanup
}
trap fk_cleanup EXIT

# launch NAME [--ready] CMD...: --ready gives CMD fd 3 on the FIFO $TMP/ready.
launch() {
  local name=$1 ready=0
  shift
  [[ $1 == --ready ]] && { ready=1; shift; }
  rm -f "$TMP/$name.pid" "$TMP/$name.exit" "$TMP/$name.log"
  (
    if ((ready)); then
      "$@" 3>"$TMP/ready" >"$TMP/$name.log" 2>&1 &
    else
      "$@" >"$TMP/$name.log" 2>&1 &
    fi
    echo $! >"$TMP/$name.pid.tmp"
    mv "$TMP/$name.pid.tmp" "$TMP/$name.pid"
    rc=0
    wait $! || rc=$?
    echo "$rc $(us_now)" >"$TMP/$name.exit.tmp"
    mv "$TMP/$name.exit.tmp" "$TMP/$name.exit"
  ) 2>/dev/null & # the subshell's own stderr: only bash's "Killed" job notice
}

# pid_of NAME: the pid of a launched program (waits for the wrapper to say).
pid_of() {
  local i
  for i in $(seq 1 200); do
    [[ -s $TMP/$1.pid ]] && { cat "$TMP/$1.pid"; return 0; }
    sleep 0.01
  done
  fail "no pid recorded for $1 after 2 s"
}

# await_exit NAME MS: wait up to MS for NAME to end; false if it did not.
await_exit() {
  local name=$1 end=$(($(us_now) + $2 * 1000))
  while [[ ! -e $TMP/$name.exit ]]; do
    (($(us_now) < end)) || return 1
    sleep 0.005
  done
}

# established PORT: a connection to the server's port is established.
established() { [[ -n $(ss -Htn state established "( sport = :$1 )") ]]; }

# one_run N VICTIM WHEN: one connection, kill VICTIM (client|server) at WHEN
# (mid|early); checks the survivor as described at the top.
one_run() {
  local n=$1 victim=$2 when=$3 smode cmode port survivor vpid vrc rc t_kill t_exit ms err deadline p
  if ((n % 2)); then smode=block cmode=block; else smode=nonblock-epoll-et cmode=poll; fi
  survivor=$([[ $victim == client ]] && echo server || echo client)
  local tag="run $n ($when, kill $victim, $smode/$cmode)"

  rm -f "$TMP/ready"
  mkfifo "$TMP/ready"
  shim_at "$TMP/server-$n.stats"
  launch "server-$n" --ready "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 \
    --mode "$smode" --timeout "$WATCHDOG"
  port=
  read -r -t 20 port <"$TMP/ready" || true
  [[ -n $port ]] || fail "$tag: the server did not report a listening port within 20 s: $(cat "$TMP/server-$n.log" 2>/dev/null)"
  shim_at "$TMP/client-$n.stats"
  launch "client-$n" "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$port" --mode "$cmode" \
    --bytes "$STREAM_BYTES" --bidir --seed "$((300 + n))" --timeout "$WATCHDOG"
  vpid=$(pid_of "$victim-$n")
  shm_note_pid "$vpid" "$(pid_of "$survivor-$n")"

  deadline=$((SECONDS + 10))
  local t_conn
  until established "$port"; do
    [[ ! -e $TMP/client-$n.exit ]] || fail "$tag: the client exited before connecting: $(cat "$TMP/client-$n.log")"
    ((SECONDS < deadline)) || fail "$tag: no established connection to port $port after 10 s"
    sleep 0.002
  done
  t_conn=$(us_now)
  if [[ $when == early ]]; then
    sleep "0.0$((RANDOM % 4))$((RANDOM % 10))" # 0-39 ms after the connection is seen
  else
    sleep "0.$((2 + RANDOM % 4))"
  fi
  for p in server client; do
    [[ ! -e $TMP/$p-$n.exit ]] || fail "$tag: the $p ended before the kill (status $(cut -d' ' -f1 "$TMP/$p-$n.exit")): $(cat "$TMP/$p-$n.log")"
  done

  t_kill=$(us_now)
  kill -KILL "$vpid"
  if ! await_exit "$survivor-$n" "$GIVE_UP_MS"; then
    fail "$tag: the $survivor was still running $GIVE_UP_MS ms after the $victim was killed (hang); its output: $(cat "$TMP/$survivor-$n.log")"
  fi
  read -r rc t_exit <"$TMP/$survivor-$n.exit"
  ms=$(((t_exit - t_kill) / 1000))
  await_exit "$victim-$n" 5000 || fail "$tag: the killed $victim (pid $vpid) did not end within 5 s"
  read -r vrc _ <"$TMP/$victim-$n.exit"
  ((vrc == 137)) || fail "$tag: the $victim exited with status $vrc before SIGKILL took it (expected 137)"

  err=$(grep -E "^stream_check $survivor: conn [0-9]+: " "$TMP/$survivor-$n.log" | head -n 1 || true)
  ! grep -q TIMEOUT "$TMP/$survivor-$n.log" ||
    fail "$tag: the $survivor's watchdog fired: it did not notice the dead peer: $(cat "$TMP/$survivor-$n.log")"
  ((rc == 1)) || fail "$tag: the $survivor exited with status $rc, expected 1 (an error reported); output: $(cat "$TMP/$survivor-$n.log")"
  [[ $err =~ (Connection\ reset\ by\ peer|Broken\ pipe|premature\ EOF) ]] ||
    fail "$tag: the $survivor's error is not a reset, broken pipe or EOF: '${err:-none}'; output: $(cat "$TMP/$survivor-$n.log")"
  log "$tag: killed $victim pid $vpid $(((t_kill - t_conn) / 1000)) ms after the connection showed up;" \
    "$survivor exited ${ms} ms after the kill: ${err#stream_check }"
  ((ms <= BOUND_MS)) ||
    fail "$tag: the $survivor took $ms ms to notice the dead $victim, bound is $BOUND_MS ms (R2S_SURVIVOR_BOUND_MS)"
  check_stats_file "$TMP/$survivor-$n.stats" conns=1 bulk=0 bytes=0 procs=1
  TIMES+=("$ms")
}

plan=()
case $mode in
client | server) for ((i = 0; i < RUNS; i++)); do plan+=("$mode mid"); done ;;
early) for ((i = 0; i < RUNS; i++)); do plan+=("client early" "server early"); done ;;
*) fail "unknown mode '$mode'" ;;
esac

# The path a killed connection had taken is not asserted: it may die before
# any upgrade.
R2SOCK_EXPECT_PATH=
TIMES=()
shm_snapshot
n=0
for p in "${plan[@]}"; do
  n=$((n + 1))
  read -r victim when <<<"$p"
  one_run "$n" "$victim" "$when"
done
wait # the wrapper subshells
sorted=$(printf '%s\n' "${TIMES[@]}" | sort -n | tr '\n' ' ')
log "survivor detection times (ms, sorted): $sorted(bound $BOUND_MS ms)"
shm_check_leaks
log PASS

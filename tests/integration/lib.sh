# shellcheck shell=bash
# Common helpers for the integration tests; sourced by every test script.
#
# A test runs real programs on 127.0.0.1 with both ends under the shim:
#   R2SOCK_LIB          absolute path to libr2sock.so; empty = run plain and
#                       skip the statistics checks (validates the test itself)
#   R2SOCK_EXPECT_PATH  tcp|shm|rdma: also assert which path the bulk took
#   R2S_KEEP_TMP=1      keep the per-test temp dir for inspection
#
# Exit codes: 0 pass, 1 fail (with a message saying what was expected and
# what was seen), 77 skip (a program is missing).

set -euo pipefail

R2SOCK_LIB=${R2SOCK_LIB-}
R2SOCK_EXPECT_PATH=${R2SOCK_EXPECT_PATH-}
R2S_TEST=$(basename "$0" .sh)${1:+-$1}
# Servers get a lifetime so that nothing outlives a test that was killed
# without running its trap (ctest timeout is 120 s).
R2S_SERVER_LIFETIME=${R2S_SERVER_LIFETIME:-110}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/r2s-$R2S_TEST.XXXXXX")
STATS=$TMP/stats
declare -A R2S_SERVER_PID=()   # name -> pid of the `timeout` wrapping it

log()  { printf '[%s] %s\n' "$R2S_TEST" "$*" >&2; }
fail() { printf '[%s] FAIL: %s\n' "$R2S_TEST" "$*" >&2; exit 1; }
skip() { printf '[%s] SKIP: %s\n' "$R2S_TEST" "$*" >&2; exit 77; }

# need PROG...: skip (77) when a program under test is not installed.
need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || skip "program '$p' is not installed"
  done
}

if [[ -n $R2SOCK_LIB ]]; then
  [[ -f $R2SOCK_LIB ]] || fail "R2SOCK_LIB=$R2SOCK_LIB does not exist"
  case $R2SOCK_EXPECT_PATH in
    ''|tcp|shm|rdma) ;;
    *) fail "R2SOCK_EXPECT_PATH must be tcp, shm or rdma, not '$R2SOCK_EXPECT_PATH'" ;;
  esac
  # A sanitizer build of the library needs its runtime loaded first:
  # R2S_PRELOAD is what goes in LD_PRELOAD (tests/preload.sh).
  # shellcheck source=tests/preload.sh
  source "$(dirname "${BASH_SOURCE[0]}")/../preload.sh"
  r2s_preload "$R2SOCK_LIB"
  if [[ $R2S_SANITIZER_RT == *libasan* ]]; then
    # Third-party programs (python, redis, iperf3, socat) leak at exit by
    # design; LeakSanitizer would fail them for it. Memory errors still
    # abort them. The shim's own leaks are checked where every program is
    # ours: tests/unit and tests/progs (run-pair.sh).
    export ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
    printf '[%s] %s\n' "$R2S_TEST" "ASan runtime preloaded; LeakSanitizer off for this test's programs (third-party exit-time leaks)" >&2
  elif [[ $R2S_SANITIZER_RT == *libtsan* ]]; then
    # Races inside third-party programs (iperf's own threads, seen through
    # TSan's free/inet_ntop interceptors) are theirs; only calls made from
    # instrumented code, the shim's, are checked.
    export TSAN_OPTIONS=ignore_noninstrumented_modules=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}
    printf '[%s] %s\n' "$R2S_TEST" "TSan runtime preloaded; races are reported for instrumented code (the shim) only" >&2
  fi
  # `env` is exec'd plain and sets LD_PRELOAD only for the program it runs.
  SHIM=(env LD_PRELOAD="$R2S_PRELOAD" R2SOCK_STATS=1 R2SOCK_STATS_FILE="$STATS")
else
  SHIM=()
fi
need timeout ss pgrep

# shim CMD...: run CMD under the shim (or plain when R2SOCK_LIB is empty).
shim() { "${SHIM[@]}" "$@"; }

# run SECS CMD...: run a client under the shim, bounded by SECS; any failure
# or time-out fails the test with the command line in the message. The
# client's stdin and stdout are the caller's (redirect around the call).
run() {
  local secs=$1 rc=0
  shift
  timeout -k 5 "$secs" "${SHIM[@]}" "$@" || rc=$?
  if ((rc == 124 || rc == 137)); then
    fail "timed out after ${secs}s: $*"
  elif ((rc != 0)); then
    fail "exit status $rc (expected 0): $*"
  fi
}

# r2s_python: set PY to the real python3 binary, so that the shim is not also
# loaded into wrapper scripts (pyenv shims) that exec it.
r2s_python() {
  need python3
  PY=$(python3 -c 'import sys; print(sys.executable)')
  [[ -x $PY ]] || fail "python3 reports sys.executable='$PY', which is not executable"
}

# free_port: print a TCP port nobody uses. Ports come from below the
# ephemeral range so that no outgoing connection on this host can hold them;
# ports already handed out in this test (listed in $TMP/ports, as callers run
# this in a command substitution) are not reused.
free_port() {
  local lo p
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
  ((lo > 12000)) || lo=40000
  touch "$TMP/ports"
  for _ in $(seq 1 200); do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
    grep -qx "$p" "$TMP/ports" && continue
    if [[ -z $(ss -Htan "( sport = :$p or dport = :$p )") ]]; then
      echo "$p" >>"$TMP/ports"
      echo "$p"
      return 0
    fi
  done
  fail "found no free TCP port in 200 tries"
}

# alive PID: the process exists and is not a zombie.
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

# listening_in_group PORT PGID: a socket listening on PORT belongs to a
# process of our server's process group (not to a stale or foreign server).
# Prints the foreign pid and returns 2 when somebody else holds the port.
listening_in_group() {
  local port=$1 pgid=$2 line pid owner=""
  line=$(ss -Hltnp "sport = :$port") || return 1
  [[ -n $line ]] || return 1
  # shellcheck disable=SC2013 # one pid per word
  for pid in $(grep -o 'pid=[0-9]*' <<<"$line" | cut -d= -f2); do
    [[ $(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ') == "$pgid" ]] && return 0
    owner=$pid
  done
  [[ -n $owner ]] && { echo "$owner"; return 2; }
  return 1
}

# start_server NAME PORT CMD...: start CMD under the shim in the background
# (output in $TMP/NAME.log), bounded by R2S_SERVER_LIFETIME, and wait up to
# 20 s until it listens on 127.0.0.1:PORT. `timeout` makes itself a process
# group leader, so the group id is its pid and covers forked workers. It also
# gives the server default SIGINT/SIGQUIT dispositions, which a background job
# of a non-interactive shell would otherwise inherit as ignored.
# Readiness is read from the socket table rather than probed with a
# connection: a probe would be the one client of `iperf3 -1`, `nc -l` or a
# one-shot socat, and would count in the server's statistics.
start_server() {
  local name=$1 port=$2 pid deadline rc foreign
  shift 2
  timeout -k 5 "$R2S_SERVER_LIFETIME" "${SHIM[@]}" "$@" </dev/null >"$TMP/$name.log" 2>&1 &
  pid=$!
  R2S_SERVER_PID[$name]=$pid
  deadline=$((SECONDS + 20))
  while :; do
    rc=0
    foreign=$(listening_in_group "$port" "$pid") || rc=$?
    ((rc == 0)) && break
    ((rc == 2)) && fail "server $name: port $port is held by pid $foreign, not by our server"
    alive "$pid" || fail "server $name exited before listening on port $port: $*"
    ((SECONDS < deadline)) || fail "server $name not listening on port $port after 20 s: $*"
    sleep 0.05
  done
  log "server $name (pid $pid) listening on 127.0.0.1:$port"
}

# server_pid NAME: pid of the `timeout` process wrapping server NAME.
server_pid() { echo "${R2S_SERVER_PID[$1]}"; }

# child_of PID: the process `timeout` runs (env execs the program in place).
child_of() {
  local c deadline=$((SECONDS + 10))
  while :; do
    c=$(pgrep -P "$1" | head -n 1) || true
    [[ -n $c ]] && { echo "$c"; return 0; }
    ((SECONDS < deadline)) || fail "no child of pid $1 after 10 s"
    sleep 0.05
  done
}

# group_gone PGID: no process of the group is left.
group_gone() { ! pgrep -g "$1" >/dev/null; }

# wait_server NAME [SECS [STATUS]]: wait until server NAME (and every process
# it forked) has exited by itself, then check its exit status (default 0).
wait_server() {
  local name=$1 secs=${2:-20} want=${3:-0} pid rc=0 deadline
  pid=${R2S_SERVER_PID[$name]}
  deadline=$((SECONDS + secs))
  while ! group_gone "$pid"; do
    ((SECONDS < deadline)) || fail "server $name (pid $pid) still running after ${secs}s; expected it to exit"
    sleep 0.05
  done
  wait "$pid" || rc=$?
  unset 'R2S_SERVER_PID[$name]'
  ((rc == want)) || fail "server $name exited with status $rc (expected $want); log: $TMP/$name.log"
}

# stop_server NAME [SIG [STATUS]]: send SIG (default TERM) to server NAME, as
# a user would: to the server process itself (the child of `timeout`, which
# would otherwise relay the signal to the whole group, i.e. twice to the
# server). Then wait for its whole process group, so that every process has
# written its stats line before the test reads them, and check the server's
# exit status (default 0). Needing SIGKILL fails the test.
stop_server() {
  local name=$1 sig=${2:-TERM} want=${3:-0} pid target
  pid=${R2S_SERVER_PID[$name]}
  target=$(pgrep -P "$pid" | head -n 1) || true
  kill -s "$sig" "${target:-$pid}" 2>/dev/null || true
  wait_server "$name" 15 "$want"
}

# Kill whatever is still running (only the process groups we started), show
# the logs of a failed test, remove the temp dir.
r2s_cleanup() {
  local rc=$? name pid f
  trap - EXIT
  for name in "${!R2S_SERVER_PID[@]}"; do
    pid=${R2S_SERVER_PID[$name]}
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do group_gone "$pid" && break; sleep 0.05; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if ((rc != 0 && rc != 77)); then
    for f in "$TMP"/*.log "$TMP"/*.out "$STATS"; do
      [[ -s $f ]] || continue
      printf -- '----- %s (last 30 lines)\n' "${f##*/}" >&2
      tail -n 30 "$f" | cut -c1-300 >&2
    done
  fi
  if [[ ${R2S_KEEP_TMP:-0} == 1 ]]; then
    log "kept $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap r2s_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# random_file PATH SIZE: SIZE random bytes (head -c syntax: 1M, 64M, 1K).
random_file() { head -c "$2" /dev/urandom >"$1"; }

# same_file EXPECTED GOT: byte-exact comparison via sha256.
same_file() {
  local want got
  [[ -f $2 ]] || fail "expected file $2 to exist (copy of $1)"
  want=$(sha256sum <"$1" | cut -d' ' -f1)
  got=$(sha256sum <"$2" | cut -d' ' -f1)
  [[ $want == "$got" ]] ||
    fail "content of $2 differs from $1: sha256 $got, expected $want (sizes $(stat -c %s "$2") vs $(stat -c %s "$1"))"
}

# file_size PATH
file_size() { stat -c %s "$1"; }

# ---- shim statistics ---------------------------------------------------
# Each preloaded process appends at exit one line to $STATS:
#   r2sock[PID] stats: key=value key=value ...

R2S_STATS_RE='^r2sock\[[0-9]+\] stats:( [a-z0-9_]+=[0-9]+)+$'

# stats_sum KEY: KEY summed over every process's line (0 if absent).
stats_sum() {
  [[ -f $STATS ]] || { echo 0; return; }
  awk -v k="$1" '/^r2sock\[[0-9]+\] stats:/ {
      for (i = 3; i <= NF; i++) { n = index($i, "="); if (substr($i, 1, n - 1) == k) s += substr($i, n + 1) }
    } END { printf "%.0f\n", s }' "$STATS"
}

# check_stats conns=N bulk=B bytes=X procs=P
#   conns: connection ends the test knows it made (each end of a connection
#          counts once, in the process that connected or accepted it)
#   bulk:  connection ends that carried the payload, i.e. those an upgrade
#          must cover; short control connections may stay TCP under a policy
#          that upgrades only after some bytes
#   bytes: payload bytes the test knows were moved (sent and received)
#   procs: preloaded processes known to have exited normally
check_stats() {
  local conns=0 bulk=0 bytes=0 procs=1 arg
  for arg in "$@"; do
    case $arg in
      conns=*) conns=${arg#*=} ;; bulk=*) bulk=${arg#*=} ;;
      bytes=*) bytes=${arg#*=} ;; procs=*) procs=${arg#*=} ;;
      *) fail "check_stats: unknown argument '$arg'" ;;
    esac
  done
  if [[ -z $R2SOCK_LIB ]]; then
    log "plain run (R2SOCK_LIB empty): shim statistics not checked"
    return 0
  fi
  [[ -s $STATS ]] || fail "expected stats lines in $STATS from $procs+ processes, found no file or an empty one"
  local bad lines
  bad=$(grep -Evc "$R2S_STATS_RE" "$STATS" || true)
  ((bad == 0)) || fail "$bad line(s) of $STATS do not match 'r2sock[PID] stats: key=value ...': $(grep -Ev "$R2S_STATS_RE" "$STATS" | head -n 3)"
  lines=$(wc -l <"$STATS")
  ((lines >= procs)) || fail "expected stats lines from at least $procs processes, saw $lines"
  local k
  for k in conn_seen conn_tcp conn_shm conn_rdma bytes_tcp_tx bytes_tcp_rx \
           bytes_shm_tx bytes_shm_rx bytes_rdma_tx bytes_rdma_rx; do
    grep -q " $k=" "$STATS" || fail "stats lines lack the key $k"
  done

  local seen tcp shm rdma tx rx
  seen=$(stats_sum conn_seen)
  tcp=$(stats_sum conn_tcp); shm=$(stats_sum conn_shm); rdma=$(stats_sum conn_rdma)
  tx=$(( $(stats_sum bytes_tcp_tx) + $(stats_sum bytes_shm_tx) + $(stats_sum bytes_rdma_tx) ))
  rx=$(( $(stats_sum bytes_tcp_rx) + $(stats_sum bytes_shm_rx) + $(stats_sum bytes_rdma_rx) ))
  log "stats: processes=$lines conn_seen=$seen conn_tcp=$tcp conn_shm=$shm conn_rdma=$rdma" \
      "bytes_tx=$tx bytes_rx=$rx (test made >= $conns connection ends, moved >= $bytes bytes)"

  ((seen >= conns)) || fail "expected conn_seen >= $conns (connection ends this test made), saw $seen"
  # A connection can end on at most one path, in the process that saw it.
  bad=$(awk '{ delete v; for (i = 3; i <= NF; i++) { n = index($i, "="); v[substr($i, 1, n - 1)] = substr($i, n + 1) }
               if (v["conn_tcp"] + v["conn_shm"] + v["conn_rdma"] > v["conn_seen"]) print $1 }' "$STATS")
  [[ -z $bad ]] || fail "conn_tcp+conn_shm+conn_rdma exceeds conn_seen in: $bad"
  ((tx >= bytes)) || fail "expected bytes_{tcp,shm,rdma}_tx summed >= $bytes (payload sent), saw $tx"
  ((rx >= bytes)) || fail "expected bytes_{tcp,shm,rdma}_rx summed >= $bytes (payload received), saw $rx"

  [[ -n $R2SOCK_EXPECT_PATH ]] || return 0
  local p=$R2SOCK_EXPECT_PATH on_path path_tx other
  on_path=$(stats_sum "conn_$p")
  path_tx=$(stats_sum "bytes_${p}_tx")
  if [[ $p == tcp ]]; then
    # Nothing may be upgraded: every connection end stays TCP.
    ((shm + rdma == 0)) || fail "R2SOCK_EXPECT_PATH=tcp: expected conn_shm+conn_rdma=0, saw conn_shm=$shm conn_rdma=$rdma"
    ((tcp >= conns)) || fail "R2SOCK_EXPECT_PATH=tcp: expected conn_tcp >= $conns, saw $tcp"
    ((path_tx == tx)) || fail "R2SOCK_EXPECT_PATH=tcp: expected all $tx bytes on tcp, saw bytes_tcp_tx=$path_tx"
    return 0
  fi
  other=$((shm + rdma - on_path))
  ((other == 0)) || fail "R2SOCK_EXPECT_PATH=$p: expected no connection on the other upgraded path, saw $other"
  # The bulk connections must be upgraded; control connections may or may not
  # be, depending on the upgrade policy, hence a range rather than one number.
  ((on_path >= bulk && on_path <= seen)) ||
    fail "R2SOCK_EXPECT_PATH=$p: expected $bulk <= conn_$p <= $seen (bulk connection ends .. all seen), saw $on_path"
  # "Bulk of bytes": at least 90% of all bytes sent, and at least 90% of the
  # payload this test knows it moved.
  ((path_tx * 10 >= tx * 9)) ||
    fail "R2SOCK_EXPECT_PATH=$p: expected >= 90% of the $tx bytes sent on $p, saw bytes_${p}_tx=$path_tx"
  ((path_tx * 10 >= bytes * 9)) ||
    fail "R2SOCK_EXPECT_PATH=$p: expected >= 90% of the $bytes payload bytes on $p, saw bytes_${p}_tx=$path_tx"
}

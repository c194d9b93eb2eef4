# Helpers for scripts that run INSIDE an rxe guest (source it):
#   . "$R2S_RXE_TOOLS/guest-lib.sh"
# guest-stage2 exports R2S_RXE_TOOLS, ROLE (a|b in a pair, else empty), MY_IP,
# PEER_IP, R2S_RXE_DEV (rxe0) and R2S_NETDEV.
#
# Conventions: every helper is bounded in time; a failed check increments
# FAILS and is named in FAILED; `finish` prints the summary and exits 1 if
# anything failed. Scripts should use `set -uo pipefail`, not `set -e`, so
# that one failed step still lets the others run and report.
# Sourced once: a script that sources another (guest-faults.sh runs
# guest-liar.sh) must not have its earlier failures reset to none.
[ -n "${R2S_GUEST_LIB:-}" ] && return 0
R2S_GUEST_LIB=1
FAILS=0 FAILED=() SKIPS=0
STEP_TMO=${STEP_TMO:-120}     # default bound of one step, seconds
LOGDIR=${LOGDIR:-/xfer/logs}  # per-step logs, kept in the host's run dir
mkdir -p "$LOGDIR"

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
# builtins only where cheap matters: every fork costs milliseconds under TCG
say() { local up _; read -r up _ < /proc/uptime; printf '[%s %6.1fs] %s\n' "${ROLE:-vm}" "$up" "$*"; }
fail() { FAILS=$((FAILS + 1)); FAILED+=("$1"); say "FAIL: $*"; }
skip() { SKIPS=$((SKIPS + 1)); say "SKIP $1: $2"; }

# step NAME CMD...: run CMD under a timeout of STEP_TMO s; print its wall time;
# record a failure. CMD may be a shell function (timeout(1) cannot run those):
# it then runs as is, so it must bound itself, as every helper here does.
step() {
  local name=$1 s rc; shift
  s=$(now)
  say "=== $name"
  if [ "$(type -t "$1")" = function ]; then
    "$@"
  else
    timeout -k 3 "$STEP_TMO" "$@"
  fi
  rc=$?
  say "=== $name: rc=$rc wall=$(printf '%.1f' "$(since "$s")")s"
  [ "$rc" = 0 ] || fail "$name (rc $rc)"
  return "$rc"
}

# finish: print the summary and exit with 0 (all passed) or 1
finish() {
  if [ "$FAILS" = 0 ]; then
    say "ALL PASSED ($SKIPS skipped)"; exit 0
  fi
  say "FAILED $FAILS: ${FAILED[*]}"; exit 1
}

# wait_for SECS CMD...: retry CMD every 0.1 s until it succeeds or SECS pass
# (a deadline, not a count: one attempt may itself take seconds). On timeout,
# the last attempt's stderr is shown.
wait_for() {
  local secs=$1 end=$(( SECONDS + $1 )); shift
  until "$@" 2>/tmp/wait_for.err; do
    if [ "$SECONDS" -ge "$end" ]; then
      say "gave up after ${secs}s: $*"; sed 's/^/    /' /tmp/wait_for.err; return 1
    fi
    sleep 0.1
  done
}
# listening PORT: something listens on TCP PORT
listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }
# wait_listen PORT SECS [PID]: wait for a server to listen; give up early if
# the server process PID has already died
wait_listen() {
  local port=$1 end=$(( SECONDS + $2 )) pid=${3:-}
  until listening "$port"; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}
# wait_pid PID SECS: wait (bounded) for a background job of this shell to end;
# kill it if it does not. Sets WRC to its exit status (137/143: killed).
wait_pid() {
  local pid=$1 end=$(( SECONDS + $2 ))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { say "pid $pid did not end in time; killing it"; kill "$pid"; }
  wait "$pid"; WRC=$?
}

# --- server/client steps ------------------------------------------------------
# serve_and_connect NAME PORT 'server cmd' 'client cmd'  (both in this guest)
# Starts the server, waits until it listens on PORT (no fixed sleep), runs the
# client, waits for the server to end. Logs: $LOGDIR/NAME.{server,client}.log
serve_and_connect() {
  local name=$1 port=$2 srv=$3 cli=$4 s spid crc src
  local sl=$LOGDIR/$name.server.log cl=$LOGDIR/$name.client.log
  s=$(now)
  say "=== $name"
  say "server: $srv"
  timeout -k 3 "$STEP_TMO" bash -c "$srv" > "$sl" 2>&1 &
  spid=$!
  if wait_listen "$port" 30 "$spid"; then
    say "client: $cli"
    timeout -k 3 "$STEP_TMO" bash -c "$cli" > "$cl" 2>&1
    crc=$?
  else
    say "server did not listen on port $port within 30 s"; crc=-1
    : > "$cl"
  fi
  # a server whose client failed may wait forever for it: bound the wait
  wait_pid "$spid" 30; src=$WRC
  sed 's/^/    server| /' "$sl"; sed 's/^/    client| /' "$cl"
  say "=== $name: client rc=$crc server rc=$src wall=$(printf '%.1f' "$(since "$s")")s"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || { fail "$name (client rc $crc, server rc $src)"; return 1; }
}

# --- pair mode (run-pair): both guests run the same script --------------------
other_role() { if [ "$ROLE" = a ]; then echo b; else echo a; fi; }
# barrier NAME [SECS]: wait until the other guest reached barrier NAME too.
# Names must be unique within a run (the marker files stay in /xfer).
barrier() {
  local name=$1 secs=${2:-120}
  [ -n "$ROLE" ] || { say "barrier outside run-pair"; return 1; }
  : > "/xfer/barrier.$name.$ROLE"
  wait_for "$secs" test -e "/xfer/barrier.$name.$(other_role)" ||
    { fail "barrier $name: guest $(other_role) did not arrive within $secs s"; return 1; }
}
# xpair NAME PORT 'server cmd (runs on a)' 'client cmd (runs on b)'
# Like serve_and_connect, across the two guests: a starts the server and tells
# b through /xfer when it listens; b runs the client and tells a when it is
# done, so that a server whose client failed is stopped soon. Each side checks
# its own half; both meet at a barrier afterwards.
xpair() {
  local name=$1 port=$2 srv=$3 cli=$4 s rc spid
  local log=$LOGDIR/$name.$ROLE.log x=/xfer/xpair.$name
  barrier "$name.start" || return 1
  s=$(now)
  if [ "$ROLE" = a ]; then
    say "=== $name server: $srv"
    timeout -k 3 "$STEP_TMO" bash -c "$srv" > "$log" 2>&1 &
    spid=$!
    if wait_listen "$port" 30 "$spid"; then : > "$x.ready"; else : > "$x.noserver"; fi
    # wait for the server to end by itself, up to STEP_TMO, but only 20 s
    # more once the client has finished
    local end=$(( SECONDS + STEP_TMO ))
    while kill -0 "$spid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do
      [ -e "$x.clientdone" ] && [ "$end" -gt $(( SECONDS + 20 )) ] && end=$(( SECONDS + 20 ))
      sleep 0.1
    done
    wait_pid "$spid" 1; rc=$WRC
  else
    if ! wait_for 40 eval "[ -e $x.ready ] || [ -e $x.noserver ]"; then
      say "server on a did not start within 40 s"; rc=-1
    elif [ -e "$x.noserver" ]; then
      say "server on a did not listen on port $port"; rc=-1
    else
      say "=== $name client: $cli"
      timeout -k 3 "$STEP_TMO" bash -c "$cli" > "$log" 2>&1
      rc=$?
    fi
    : > "$x.clientdone"
  fi
  [ -e "$log" ] && sed "s/^/    $ROLE| /" "$log"
  say "=== $name ($ROLE): rc=$rc wall=$(printf '%.1f' "$(since "$s")")s"
  [ "$rc" = 0 ] || fail "$name on $ROLE (rc $rc)"
  barrier "$name.done" || return 1
  [ "$rc" = 0 ]
}

# --- rxe device counters --------------------------------------------------------
# rxe_snap TAG [DEV]: remember DEV's (default rxe0) port counters under TAG.
# rxe_delta TAG [DEV]: print what changed since rxe_snap TAG and fill the
#   associative array RXE_DELTA (RXE_DELTA[sent_pkts], RXE_DELTA[rcvd_pkts], ...)
# rxe_expect TAG COUNTER MIN [DEV]: fail unless COUNTER grew by >= MIN since TAG.
# A later test asserts with these that a payload really crossed rxe0 (e.g. more
# packets than the handshake alone would send) rather than the TCP socket.
declare -gA RXE_DELTA=()
rxe_counters_dir() { echo "/sys/class/infiniband/${1:-rxe0}/ports/1/hw_counters"; }
rxe_snap() {
  local f v d; d=$(rxe_counters_dir "${2:-}")
  for f in "$d"/*; do read -r v < "$f"; echo "${f##*/} $v"; done > "/tmp/rxe-snap.$1"
}
rxe_delta() {
  local tag=$1 dev=${2:-rxe0} name old new d line=""
  d=$(rxe_counters_dir "$dev")
  [ -r "/tmp/rxe-snap.$tag" ] || { say "rxe_delta: no snapshot $tag"; return 1; }
  RXE_DELTA=()
  while read -r name old; do
    read -r new < "$d/$name"
    RXE_DELTA[$name]=$(( new - old ))
    # always show the packet counters; the others only when they moved
    if [ "${RXE_DELTA[$name]}" != 0 ] || [ "$name" = sent_pkts ] || [ "$name" = rcvd_pkts ]; then
      line+=" $name=+${RXE_DELTA[$name]}"
    fi
  done < "/tmp/rxe-snap.$tag"
  say "$dev counters during $tag:$line"
}
rxe_expect() {
  local tag=$1 name=$2 min=$3 old new d
  d=$(rxe_counters_dir "${4:-}")
  old=$(awk -v n="$name" '$1 == n {print $2}' "/tmp/rxe-snap.$tag" 2>/dev/null)
  [ -n "$old" ] && [ -r "$d/$name" ] || { fail "rxe_expect: no counter $name in snapshot $tag"; return 1; }
  read -r new < "$d/$name"
  if [ $(( new - old )) -ge "$min" ]; then
    say "ok: $name grew by $(( new - old )) (>= $min) during $tag"
  else
    fail "$name grew by $(( new - old )) during $tag, expected >= $min"; return 1
  fi
}

# --- output parsers ---------------------------------------------------------------
# ib_bw_gbps LOG: the "BW average[Gb/sec]" of a perftest *_bw --report_gbits run
ib_bw_gbps() {
  awk '/BW average/ {h = 1; next} h && $1 ~ /^[0-9]+$/ {print $4; exit}' "$1"
}
# iperf3_rate LOG: the receiver's rate of an iperf3 client run with -f m, Mbit/s
iperf3_rate() {
  awk '/receiver/ {for (i = 2; i <= NF; i++) if ($i ~ /bits\/sec/) {print $(i - 1); exit}}' "$1"
}
# positive NUMBER: NUMBER is a number > 0
positive() { [ -n "$1" ] && [ "$(echo "$1 > 0" | bc 2>/dev/null)" = 1 ]; }

# --- the shim's statistics ----------------------------------------------------------
# r2s_stats_check FILE NPROCS KEY MIN [MAX]: FILE has `r2sock[PID] stats:
# k=v ...` lines from at least NPROCS processes, and in each of them
# MIN <= KEY (<= MAX) (the last line of a process counts). Prints one line
# per process.
r2s_stats_check() {
  local file=$1 nprocs=$2 key=$3 min=$4 max=${5:--1}
  [ -s "$file" ] || { say "no stats in $file"; return 1; }
  awk -v key="$key" -v min="$min" -v max="$max" -v n="$nprocs" '
    match($0, /r2sock\[[0-9]+\] stats:/) {
      pid = substr($0, RSTART, RLENGTH); sub(/^r2sock\[/, "", pid); sub(/\].*/, "", pid)
      seen[pid] = 1
      nf = split(substr($0, RSTART + RLENGTH), kv, /[ \t]+/)
      for (i = 1; i <= nf; i++)
        if (split(kv[i], p, "=") == 2 && p[1] == key) val[pid] = p[2] + 0
    }
    END {
      np = 0; bad = 0
      for (pid in seen) {
        np++
        if (pid in val) printf "    pid %s: %s=%d\n", pid, key, val[pid]
        else printf "    pid %s: no %s\n", pid, key
        if (!(pid in val) || val[pid] < min || (max >= 0 && val[pid] > max)) bad++
      }
      if (np < n) { printf "    expected stats of >= %d processes, found %d\n", n, np; exit 1 }
      if (bad && max >= 0) { printf "    %d process(es) with %s outside %d..%d\n", bad, key, min, max; exit 1 }
      if (bad) { printf "    %d process(es) with %s < %d\n", bad, key, min; exit 1 }
    }' "$file"
}

# r2s_stats_share FILE PATH PCT: in every process of FILE (its last line),
# bytes_PATH_tx + bytes_PATH_rx is at least PCT % of all its payload bytes
# (bytes_*_tx + bytes_*_rx). Prints each process's share.
r2s_stats_share() {
  local file=$1 path=$2 pct=$3
  [ -s "$file" ] || { say "no stats in $file"; return 1; }
  awk -v path="$path" -v pct="$pct" '
    match($0, /r2sock\[[0-9]+\] stats:/) {
      pid = substr($0, RSTART + 7, RLENGTH - 7); sub(/\].*/, "", pid)
      on[pid] = 0; all[pid] = 0
      nf = split(substr($0, RSTART + RLENGTH), kv, /[ \t]+/)
      for (i = 1; i <= nf; i++) {
        if (split(kv[i], p, "=") != 2 || p[1] !~ /^bytes_[a-z]+_(tx|rx)$/) continue
        all[pid] += p[2]
        if (p[1] ~ "^bytes_" path "_") on[pid] += p[2]
      }
    }
    END {
      bad = 0
      for (pid in all) {
        s = all[pid] ? 100 * on[pid] / all[pid] : 0
        printf "    pid %s: %.1f %% of %d payload bytes over %s\n", pid, s, all[pid], path
        if (s < pct) bad++
      }
      exit bad ? 1 : 0
    }' "$file"
}

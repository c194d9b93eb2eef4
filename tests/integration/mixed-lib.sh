# shellcheck shell=bash
# Helpers shared by the mixed-peer (mixed-*.sh) and fault (fault-*.sh) tests;
# sourced after lib.sh. Not a test by itself.
#
#   PLAIN          command prefix that runs a program without the shim, even
#                  when the caller's environment preloads something
#   shim_at FILE   command prefix (in the array SHIM_AT) that runs a program
#                  under the shim with its stats in FILE; plain when
#                  R2SOCK_LIB is empty
#   shm_snapshot / shm_check_leaks
#                  /dev/shm/r2s-* segments the shim made during the test and
#                  left behind (see below)
#   check_tcp_only FILE conns=N bytes=B procs=P
#                  check_stats on FILE with the path forced to tcp: the
#                  connection ends in FILE must not have been upgraded,
#                  whatever R2SOCK_EXPECT_PATH the suite runs with
#   LIVE, live_cleanup
#                  background pids a test started; killed at exit
#   us_now         microseconds since the epoch, without a fork
#   needs_rings WHY_NO_SHIM WHY_NEVER
#                  the preamble of the tests that mean something only where
#                  rings can be made (fault-limits.sh, security.sh,
#                  failover.sh): SC is stream_check; skips, with the reason
#                  given, without the shim or under R2SOCK_UPGRADE=never;
#                  live_cleanup at exit; the test makes its own path checks
#   sc_server STATS [PREFIX...] -- [ARGS...]
#                  stream_check's server in the background (see below);
#                  sets SC_PID and SC_PORT
#   run_to FILE SECS CMD...
#                  lib.sh's run() with CMD's stdout and stderr in FILE; a
#                  failure message shows FILE's tail. (Redirecting around
#                  run() itself would also swallow fail()'s message and the
#                  cleanup's log dump, which run inside the redirection.)
#   start_server_at NAME PORT FILE CMD...
#   run_to_at OUT SECS FILE CMD...
#                  start_server and run_to with CMD under shim_at FILE: each
#                  side's stats in a file of its own (see below)
#   NO_OFFER, check_no_offer_answered LABEL BARE_STATS BARE_LOG OTHER_STATS OTHER_LOG
#                  an end that can make no offer, and the check that it told
#                  its peer, whose direction went back to plain TCP (below)
#   FRAMER, FRAMED_TO, needs_lasting_frames,
#   check_frames_kept LABEL FRAMER_STATS FRAMER_LOG PEER_STATS
#                  a send direction kept on DATA frames for the whole
#                  connection, and the check that it was (see below)

PLAIN=(env -u LD_PRELOAD)

# LIVE: pids of background programs a test started itself. With
# `trap live_cleanup EXIT` they are killed before lib.sh's cleanup, so
# nothing of a failed run outlives the test.
LIVE=()
live_cleanup() {
  local rc=$? p
  for p in "${LIVE[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # r2s_cleanup reads the status from $?; set -e would end this trap at the
  # (exit) that sets it.
  set +e
  trap - ERR
  (exit "$rc")
  r2s_cleanup
}

# Under set -e a command that fails outside fail() ends the test silently:
# name it. (errtrace: also inside functions and command substitutions.)
set -E
trap 'printf "[%s] FAIL: unexpected status %s at %s line %s: %s\n" "$R2S_TEST" "$?" "${BASH_SOURCE[0]##*/}" "$LINENO" "$BASH_COMMAND" >&2' ERR

# shellcheck disable=SC2034 # SHIM_AT is this function's result
shim_at() {
  if [[ -n $R2SOCK_LIB ]]; then
    SHIM_AT=(env LD_PRELOAD="$R2S_PRELOAD" R2SOCK_STATS=1 R2SOCK_STATS_FILE="$1")
  else
    SHIM_AT=("${PLAIN[@]}")
  fi
}

# shellcheck disable=SC2034 # SC and R2SOCK_EXPECT_PATH are for the caller
needs_rings() {
  SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
  [[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"
  [[ -n $R2SOCK_LIB ]] || skip "$1"
  [[ ${R2SOCK_UPGRADE:-never} != never ]] || skip "R2SOCK_UPGRADE=never: $2"
  trap live_cleanup EXIT
  R2SOCK_EXPECT_PATH=
}

# sc_server STATS [PREFIX...] -- [ARGS...]: stream_check's server on
# 127.0.0.1, on a port of its choosing, under shim_at STATS behind the
# command PREFIX (may be empty; no word of it is --), with ARGS, in the
# background (in LIVE). Its output goes to server.log in SC_DIR (default
# $TMP), where its port comes back through a fifo anybody may write (the
# server may run as another user). Sets SC_PID, and SC_PORT once it
# listens.
sc_server() {
  local stats=$1 dir=${SC_DIR:-$TMP} prefix=() SHIM_AT
  shift
  while (($#)) && [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  (($#)) && shift
  rm -f "$dir/ready"
  mkfifo -m 0666 "$dir/ready"
  shim_at "$stats"
  "${prefix[@]}" "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 "$@" 3>"$dir/ready" \
    >"$dir/server.log" 2>&1 &
  SC_PID=$!
  LIVE+=("$SC_PID")
  SC_PORT=
  read -r -t 20 SC_PORT <"$dir/ready" || true
  [[ -n $SC_PORT ]] || fail "the server reported no port: $(cat "$dir/server.log")"
}

run_to() {
  local out=$1 secs=$2 rc=0
  shift 2
  timeout -k 5 "$secs" "$@" >"$out" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    fail "timed out after ${secs}s: $*; its output: $(tail -n 5 "$out")"
  elif ((rc != 0)); then
    fail "exit status $rc (expected 0): $*; its output: $(tail -n 5 "$out")"
  fi
}

# start_server_at NAME PORT FILE CMD... and run_to_at OUT SECS FILE CMD...:
# start_server and run_to with CMD under shim_at FILE. They exist for the
# tests that check a server's and its client's counters apart, each side's
# in a stats file of its own: one line a side instead of shim_at, a reset of
# SHIM and the call. start_server_at leaves lib.sh's SHIM (stats in the
# shared $STATS), which start_server would put in front of SHIM_AT's prefix,
# off that server. SHIM and SHIM_AT are local: the caller's stay as they were.
# shellcheck disable=SC2034 # the local SHIM is for start_server
start_server_at() {
  local name=$1 port=$2 SHIM=() SHIM_AT
  shim_at "$3"
  shift 3
  start_server "$name" "$port" "${SHIM_AT[@]}" "$@"
}

run_to_at() {
  local out=$1 secs=$2 SHIM_AT
  shim_at "$3"
  shift 3
  run_to "$out" "$secs" "${SHIM_AT[@]}" "$@"
}

# ---- an end with no ring to offer -------------------------------------------
# NO_OFFER runs an end that may use only RDMA, on a device that does not
# exist: its switch finds nothing to offer. When its peer switches towards
# it, it answers with the interlude (HANDSHAKE without offers), and the peer
# sends its own direction back to plain TCP (src/link/attach.c).
# shellcheck disable=SC2034 # for the caller
NO_OFFER=(env R2SOCK_TRANSPORT=rdma R2SOCK_DEVICE=r2s-no-such-device)

# check_no_offer_answered LABEL BARE_STATS BARE_LOG OTHER_STATS OTHER_LOG:
# the end without an offer counted tcp_no_device and said it told its peer;
# the peer counted tcp_unreachable, and its log says it switched and then
# went back to plain TCP. Both ends logged at debug level.
check_no_offer_answered() {
  local label=$1 bstats=$2 blog=$3 ostats=$4 olog=$5 nd un
  nd=$(STATS=$bstats stats_sum tcp_no_device)
  un=$(STATS=$ostats stats_sum tcp_unreachable)
  ((nd == 1 && un == 1)) ||
    fail "$label: expected tcp_no_device=1 on the end without a device and tcp_unreachable=1 on its peer, saw $nd and $un: $(cat "$bstats" "$ostats")"
  grep -q "debug: told the peer that our send direction stays on plain TCP (no ring to offer)" "$blog" ||
    fail "$label: the end without a device did not tell its peer: $(grep debug "$blog" | tail -n 5)"
  grep -q "debug: switched the send direction" "$olog" ||
    fail "$label: the peer never switched: nothing was tested: $(grep debug "$olog" | tail -n 5)"
  grep -q "debug: the peer's ring is out of reach (.*no ring offered): the send direction goes back to plain TCP" \
    "$olog" || fail "$label: the peer's direction did not go back to plain TCP: $(grep debug "$olog" | tail -n 5)"
}

# ---- a send direction on DATA frames for good ------------------------------
# A direction carries DATA frames from its switch until the peer's ring is
# known: for the first bytes of most connections. The frames variants of
# idle-wait and zero-reads need one that stays framed. One does when its end
# cannot map the peer's ring for a shortage of its own: the peer may still
# send through ours (and its doorbells need our framed direction), so the
# direction is not sent back to plain TCP (src/link/attach.c, try_ring_tx). An end
# run with FRAMER lives under an address-space limit (800 MB) that its own
# ring fits in and the 1 GiB ring of its peer, run with FRAMED_TO, does not:
# the mapping fails with ENOMEM. (Until 2026-11-27 the framed direction came
# from an end that made no offer; such an end now tells its peer, and both
# directions go plain.) A sanitizer runtime reserves terabytes of address
# space at start: needs_lasting_frames skips there.
# shellcheck disable=SC2034 # for the caller
FRAMER=(prlimit --as=800000000 -- env R2SOCK_LOG=debug)
# shellcheck disable=SC2034 # for the caller
FRAMED_TO=(env R2SOCK_RING_SIZE=1G)

needs_lasting_frames() {
  [[ -z ${R2S_SANITIZER_RT:-} ]] ||
    skip "a sanitizer runtime reserves terabytes of address space: no RLIMIT_AS keeps one ring out and lets it start"
}

# check_frames_kept LABEL FRAMER_STATS FRAMER_LOG PEER_STATS: the framer
# switched, could not map its peer's ring and sent all its bytes over TCP
# (its log says why and never that the direction went back to plain TCP);
# the peer sent through the framer's ring. (Each end counts the connection
# in conn_shm: one of its directions went through a ring.)
check_frames_kept() {
  local label=$1 fstats=$2 flog=$3 pstats=$4 f_ring f_tcp p_ring
  f_ring=$(STATS=$fstats stats_sum bytes_shm_tx)
  f_tcp=$(STATS=$fstats stats_sum bytes_tcp_tx)
  p_ring=$(STATS=$pstats stats_sum bytes_shm_tx)
  ((f_ring == 0 && f_tcp > 0 && p_ring > 0)) ||
    fail "$label: expected the framer to send nothing through a ring and its peer to send through one, saw the framer's bytes_shm_tx=$f_ring bytes_tcp_tx=$f_tcp and the peer's bytes_shm_tx=$p_ring: $(cat "$fstats" "$pstats")"
  grep -q "debug: switched the send direction" "$flog" ||
    fail "$label: the framer never switched its send direction: its bytes were not in DATA frames"
  grep -q "cannot attach the peer's ring (Cannot allocate memory): staying on TCP frames" "$flog" ||
    fail "$label: the framer did not say that the peer's ring was out of its address space: $(grep debug "$flog" | tail -n 5)"
  if grep -q "goes back to plain TCP" "$flog"; then
    fail "$label: the framer's direction went back to plain TCP: $(grep debug "$flog" | tail -n 5)"
  fi
  log "$label: the framer sent $f_tcp bytes in DATA frames, its peer $p_ring through the framer's ring"
}

us_now() {
  local t=${EPOCHREALTIME/[.,]/}
  echo "$((10#$t))"
}

# check_stats_file FILE ARGS...: lib.sh's check_stats on one stats file.
check_stats_file() {
  local file=$1 saved=$STATS rc=0
  shift
  STATS=$file
  check_stats "$@" || rc=$?
  STATS=$saved
  return "$rc"
}

check_tcp_only() {
  local file=$1 saved=$R2SOCK_EXPECT_PATH
  shift
  R2SOCK_EXPECT_PATH=tcp
  check_stats_file "$file" "$@"
  R2SOCK_EXPECT_PATH=$saved
}

# ---- shared-memory segments ------------------------------------------------
# The shm transport names its rings /dev/shm/r2s-<creator pid>-<random>
# (src/transport/shm.c) and unlinks a name once the peer has mapped it; each
# process's live-statistics segment is /dev/shm/r2s-stat-<pid>, removed at
# exit, or by a surviving process or r2sock-stat when it was killed. After
# a test every process it started has exited (killed ones included), so any
# segment one of them created that is still there is a leak: nobody is left
# to unlink it. "One of them": a pid found in a stats line the test collected
# (every process under the shim writes "r2sock[PID] stats: ..." at exit) or
# registered with shm_note_pid (processes that were killed and wrote none).
# Segments of other tests or developers running at the same time are thus
# left alone, neither blamed nor removed; a new name without a pid is counted
# as ours. Today no segment is ever made and this checks nothing more than
# that.
R2S_SHM_DIR=${R2S_SHM_DIR:-/dev/shm}

shm_list() {
  local f
  for f in "$R2S_SHM_DIR"/r2s-*; do
    [[ -e $f ]] && echo "${f##*/}"
  done
  return 0
}

shm_snapshot() { shm_list | sort >"$TMP/shm.before"; }

# shm_note_pid PID...: processes of this test that will write no stats line.
shm_note_pid() { printf '%s\n' "$@" >>"$TMP/shm.pids"; }

shm_our_pids() {
  local f
  {
    for f in "$TMP/shm.pids" "$TMP"/*stats*; do
      [[ -f $f ]] || continue
      if [[ $f == "$TMP/shm.pids" ]]; then
        cat "$f"
      else
        sed -n 's/^r2sock\[\([0-9]*\)\] stats:.*/\1/p' "$f"
      fi
    done
  } | sort -u
}

shm_check_leaks() {
  local deadline name pid ours leaked foreign
  [[ -f $TMP/shm.before ]] || fail "shm_check_leaks without shm_snapshot"
  ours=" $(shm_our_pids | tr '\n' ' ') "
  # A segment may be unlinked by a process that is just exiting: allow 2 s.
  deadline=$((SECONDS + 2))
  while :; do
    leaked=() foreign=0
    while read -r name; do
      [[ -n $name ]] || continue
      # The creator's pid is the first all-digit field (r2s-PID-RANDOM for
      # rings; other segments of the r2s- family, r2s-stat-PID, name it too).
      # A name without one, or another process's, is not this test's leak.
      pid=
      [[ $name =~ -([0-9]+)(-|$) ]] && pid=${BASH_REMATCH[1]}
      if [[ -z $pid || $ours != *" $pid "* ]]; then
        foreign=$((foreign + 1))
        continue
      fi
      leaked+=("$name")
    done < <(comm -13 "$TMP/shm.before" <(shm_list | sort))
    if ((${#leaked[@]} == 0)); then
      log "no /dev/shm/r2s-* segment left behind by this test's processes" \
        "($(wc -w <<<"$ours") pids known$( ((foreign)) && echo "; $foreign new segment(s) of other processes ignored"))"
      return 0
    fi
    ((SECONDS < deadline)) || break
    sleep 0.1
  done
  # Remove ours so that one failure does not fail the next test too.
  for name in "${leaked[@]}"; do rm -f "$R2S_SHM_DIR/$name"; done
  fail "the shim left ${#leaked[@]} shared-memory segment(s) behind: ${leaked[*]} (expected none once every process of the test has exited)"
}

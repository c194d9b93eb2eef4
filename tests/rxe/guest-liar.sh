#!/bin/bash
# A lying peer over RDMA, inside an rxe guest (run from guest-faults.sh, in
# the rxe.faults boot; alone: scripts/rxe/run-guest -- 'bash tests/rxe/guest-liar.sh').
# For every rdma-* case of `lying_peer --list` (tests/hostile/lying_peer.c,
# liar_rdma.c), one run: a stream_check server under the shim with
# R2SOCK_TRANSPORT=rdma (block mode, two connections at once; three for
# rdma-other-conn, where the liar connects twice) serves an
# honest shim'd client (4 MiB each way over RDMA) and the liar, which speaks
# the protocol, connects its own queue pair to the server's, then lies
# through RDMA (ring and credit words, writes and reads outside the
# registered regions, immediates, SENDs, its offer). Each run asserts:
#   - the liar reached the outcome its case expects (lying_peer checks on its
#     side that out-of-bounds writes and the read completed in error, and
#     that a server without credits never wrote past them);
#   - the server did not crash: exit 0, or 1 with exactly one failed
#     connection whose error is a reset, broken pipe or premature EOF;
#   - the shim counted why: reset_protocol (a ring index out of bounds) or
#     reset_rdma (a failed work request) in the server's stats, with its
#     warning in the log; a declined offer shows as path=tcp;
#   - the honest connection in the same process ended on path=rdma with its
#     bytes verified;
#   - no sanitizer report (R2SOCK_LIAR_BUILD may name an ASan build dir whose
#     libr2sock.so and stream_check then run the server and the honest client).
# Prints the lies tried and the bytes verified. Skipped when R2SOCK_LIB is empty.
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"
IP=$MY_IP
VB=${R2SOCK_LIAR_BUILD:-${R2SOCK_BUILD:-}} # the victim's build
LIB=${R2SOCK_LIAR_BUILD:+$R2SOCK_LIAR_BUILD/libr2sock.so}
LIB=${LIB:-${R2SOCK_LIB:-}}
SC=$VB/tests/progs/stream_check
LIAR=${R2SOCK_BUILD:-}/tests/hostile/lying_peer
if [ -z "$LIB" ]; then
  skip "lying peer over RDMA" "R2SOCK_LIB is empty (libr2sock.so not built)"
  if [ "${BASH_SOURCE[0]}" = "$0" ]; then finish; else return 0; fi
fi
# shellcheck source=tests/preload.sh
. "$(dirname "${BASH_SOURCE[0]}")/../preload.sh"
r2s_preload "$LIB"
# LeakSanitizer off: at the end of a failed connection the server exits
# through stream_check's error path; memory errors still abort.
[[ $R2S_SANITIZER_RT == *libasan* ]] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
V_ENV=(LD_PRELOAD="$R2S_PRELOAD" R2SOCK_UPGRADE=now R2SOCK_TRANSPORT=rdma R2SOCK_STATS=1 R2SOCK_LOG=info)
SAN_RE='AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:'
# the shim's counter (server's stats) and warning each case must leave
declare -A WHY=(
  [rdma-tail-past]=reset_protocol [rdma-tail-back]=reset_protocol [rdma-tail-garbage]=reset_protocol
  [rdma-imm-tail]=reset_protocol
  [rdma-head-past]=reset_protocol [rdma-head-back]=reset_protocol
  [rdma-write-past-ring]=reset_rdma [rdma-write-past-credit]=reset_rdma [rdma-read]=reset_rdma
  [rdma-send]=reset_rdma [rdma-bad-rkey]=reset_rdma [rdma-ring-size]=reset_rdma
  [rdma-other-conn]=reset_rdma
)
declare -A WARN=([reset_protocol]='connection reset: ' [reset_rdma]='RDMA connection failed')

# stat_of FILE KEY: KEY's value in the last stats line of FILE (0 if none)
stat_of() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$1" | tail -n 1 | grep . || echo 0; }

liar_case() { # NAME EXPECT PORT
  local c=$1 want=$2 port=$3 d=$LOGDIR/liar.$1 spid hpid lpid src hrc lrc ok=1 conns=2
  # rdma-other-conn: the liar's second connection, whose ring its first
  # one's queue pair tries to write, must end verified
  [ "$c" = rdma-other-conn ] && conns=3
  mkdir -p "$d"
  env "${V_ENV[@]}" R2SOCK_STATS_FILE="$d/stats" "$SC" server --host "$IP" --port "$port" --conns $conns --mode block \
    --timeout 60 > "$d/server.log" 2>&1 &
  spid=$!
  wait_listen "$port" 20 "$spid" || { fail "liar $c: no server"; kill -9 "$spid" 2>/dev/null; return; }
  env "${V_ENV[@]}" R2SOCK_STATS_FILE="$d/honest.stats" "$SC" client --host "$IP" --port "$port" --mode block \
    --bytes 4M --bidir --seed "$port" --timeout 60 > "$d/honest.log" 2>&1 &
  hpid=$!
  local largs=(--host "$IP" --port "$port" --case "$c" --bytes 512K --timeout 60)
  [ "$c" = rdma-stall-credits ] && largs+=(--go-file "$d/go" --watch-pid "$spid")
  "$LIAR" "${largs[@]}" > "$d/liar.log" 2>&1 &
  lpid=$!
  wait_pid "$hpid" 70; hrc=$WRC
  touch "$d/go" # the honest connection is done: stall-credits may measure now
  wait_pid "$lpid" 70; lrc=$WRC
  wait_pid "$spid" 30; src=$WRC
  local errs nerr why=${WHY[$c]:-}
  errs=$(grep -E '^stream_check server: conn [0-9]+: ' "$d/server.log")
  nerr=$(grep -c . <<< "$errs")
  note() { ok=0; say "  liar $c: $*"; }
  grep -Eq "$SAN_RE" "$d"/*.log && note "a sanitizer report"
  [ "$lrc" = 0 ] || note "the liar exited $lrc (expected outcome $want)"
  [ "$hrc" = 0 ] && grep -q '^stream_check client: OK' "$d/honest.log" || note "the honest client failed (rc $hrc)"
  grep -q 'info: conn .* client .* path=rdma' "$d/honest.log" || note "the honest connection did not end on RDMA"
  if [ "$want" = verified ]; then
    [ "$src" = 0 ] && [ "$nerr" = 0 ] || note "the server failed (status $src) where the liar's stream should pass"
    [[ $c == rdma-bad-qpn || $c == rdma-huge-ring || $c == rdma-fit-odd ]] && ! grep -q 'path=tcp (no-resources)' "$d/server.log" &&
      note "expected the liar's connection on path=tcp (no-resources)"
    # the liar's honest cases: its connection was on RDMA too
    [[ $c != rdma-bad-qpn && $c != rdma-huge-ring && $c != rdma-fit-odd ]] && [ "$(grep -c 'info: conn .* server .* path=rdma' "$d/server.log")" -lt 2 ] &&
      note "expected both server connections on path=rdma"
  else
    [ "$src" = 1 ] && [ "$nerr" = 1 ] || note "expected server status 1 with one failed connection, got $src and $nerr"
    [ "$c" = rdma-other-conn ] && [ "$(grep -c 'info: conn .* server .* path=rdma' "$d/server.log")" -lt 3 ] &&
      note "expected all three server connections on path=rdma"
    [[ $errs =~ (Connection\ reset\ by\ peer|Broken\ pipe|premature\ EOF) ]] || note "the server's error is not a reset, broken pipe or EOF: $errs"
  fi
  if [ -n "$why" ]; then
    [ "$(stat_of "$d/stats" "$why")" -ge 1 ] || note "the server's stats do not count $why"
    grep -q "${WARN[$why]}" "$d/server.log" || note "no '${WARN[$why]}' warning in the server's log"
  fi
  local line bad ver hver
  line=$(grep '^lying_peer: case ' "$d/liar.log" | tail -n 1)
  bad=$(sed -n 's/.* bad_inputs=\([0-9]*\).*/\1/p' <<< "$line")
  ver=$(sed -n 's/.* verified=\([0-9]*\).*/\1/p' <<< "$line")
  hver=$(sed -n 's/.* verified=\([0-9]*\).*/\1/p' "$d/honest.log")
  LIES=$((LIES + ${bad:-0})) HONEST=$((HONEST + ${hver:-0})) LIARV=$((LIARV + ${ver:-0})) RUNS=$((RUNS + 1))
  if [ "$ok" = 1 ]; then
    say "liar $c: $want as expected; server status $src; ${why:+$why=$(stat_of "$d/stats" "$why"); }$(grep -ho 'completed with: .*\|stalled server used.*' "$d/liar.log" | head -n 1)${errs:+ server: ${errs#stream_check server: }}"
  else
    fail "liar $c"
    for f in liar server honest; do sed "s/^/    $f| /" "$d/$f.log" | tail -n 12 | cut -c1-300; done
  fi
}

LIES=0 HONEST=0 LIARV=0 RUNS=0
[ -n "$R2S_SANITIZER_RT" ] && say "liar: the server and the honest client run the sanitizer build $VB (${R2S_SANITIZER_RT##*/})"
port=7300
while IFS=$'\t' read -r name expect _; do
  [[ $name == rdma-* ]] || continue
  [ -n "${R2SOCK_LIAR_CASES:-}" ] && [[ " $R2SOCK_LIAR_CASES " != *" $name "* ]] && continue
  liar_case "$name" "$expect" $port
  port=$((port + 1))
done < <("$LIAR" --list)
say "lying peer over RDMA: $RUNS runs, $LIES lies tried, $HONEST bytes verified on the honest connections, $LIARV on the liar's"
[ "${BASH_SOURCE[0]}" = "$0" ] && finish

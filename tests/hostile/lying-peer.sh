#!/usr/bin/env bash
# A lying peer against a real shim'd program (tests/hostile/lying_peer.c).
# For every case of `lying_peer --list`, one run: a stream_check server under
# the shim (R2SOCK_UPGRADE=now, block mode, two connections at once) serves
# an honest shim'd stream_check client (16 MiB each way through shared
# memory) and the liar at the same time. Each run asserts:
#   - the liar reached the outcome its case expects: the whole stream
#     verified (honest cases, lies the shim may ignore, segment lies it must
#     refuse by falling back to TCP frames), or the connection closed by the
#     server's side (EOF or reset) after the lie;
#   - the server did not crash (exit 0, or 1 with exactly one failed
#     connection whose error is a reset, a broken pipe or a premature EOF,
#     never a data mismatch) and printed no sanitizer report;
#   - a lie that is a protocol error left a warning naming it
#     ("connection reset: ..."); a refused segment shows as path=tcp with the
#     reason the case expects in the server's per-connection info line;
#   - the honest connection, served by the same process at the same time,
#     moved and verified its bytes through shared memory (path=shm);
#   - stall-credits: while the server's writer waits for credits that never
#     come, the server process uses under half a core (no spinning), and
#     never writes past the credits it had;
#   - rings by descriptor (fetch-*, handed-*): the server's rings_by_fd
#     counter says how many rings it took by descriptor (1 where it took the
#     liar's, else 0); the liar's connection ended on shared memory where
#     the ring was taken; handed-*: the liar looks in /proc/<server>/ that
#     a refused descriptor is neither open nor mapped in the server, and
#     that the server's FETCH socket is closed once it answered;
#   - no /dev/shm/r2s-* segment is left once all are gone.
# Prints the number of bad inputs tried and the bytes verified.
#   usage: lying-peer.sh [CASE...]   (default: every case)
# ctest runs one case per test (hostile.lying-peer.CASE,
# lying-peer-cases.cmake.in); a run whose every case needs what this
# machine lacks skips (77).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/../integration/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/../integration/mixed-lib.sh"

BUILD=${R2SOCK_BUILD:-$(dirname "$0")/../../build}
SC=$BUILD/tests/progs/stream_check
LIAR=$BUILD/tests/hostile/lying_peer
[[ -x $SC && -x $LIAR ]] || fail "stream_check or lying_peer not built under $BUILD (set R2SOCK_BUILD)"
[[ -n $R2SOCK_LIB ]] || skip "a lying peer needs the shim on the other end (R2SOCK_LIB is empty)"
export R2SOCK_UPGRADE=now

# The server's per-connection line for the liar's connection says which
# path it ended on, and why when it is TCP.
declare -A REASON=(
  [honest-frames]=unreachable [name-missing]=no-resources [name-prefix]=no-resources
  [name-mode]=no-resources [name-size]=no-resources [name-ringsize]=no-resources
  [name-symlink]=no-resources [name-other-user]=other-user [name-own-ring]=no-resources
  # A ring by descriptor refused: attach()'s ENOENT, which made the server
  # ask, stands (DECLINE 2, frames).
  [handed-wrong-nonce]=no-resources [handed-unsealed]=no-resources [handed-shm-file]=no-resources
  [handed-wrong-size]=no-resources [handed-nothing]=no-resources [handed-no-fd]=no-resources
  [handed-two-fds]=no-resources [handed-status]=no-resources [handed-plain]=no-resources
)
# Rings the server took by descriptor (its stats' rings_by_fd) in the
# fetch-* and handed-* cases: these, 0 in the others.
declare -A BY_FD=([handed-honest]=1 [handed-impostor]=1 [handed-twice]=1)
# Cases where the liar's connection, too, ends on shared memory.
SHM_CASES=" fetch-honest fetch-nobody handed-honest handed-impostor handed-own-ring "
# Cases where the server sees an end of stream, not a protocol error.
EOF_CASES=" trunc-hdr-eof trunc-payload-eof mark-eof stall-credits die-mid-ring "
SAN_RE='AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer|runtime error:'

# The rdma-* cases need an RDMA device: they run in the rxe guest
# (tests/rxe/guest-liar.sh).
if (($# > 0)); then cases=("$@"); else mapfile -t cases < <("$LIAR" --list | cut -f1 | grep -v '^rdma-'); fi
declare -A expect=() index=()
while IFS=$'\t' read -r name outcome _; do
  expect[$name]=$outcome index[$name]=${#index[@]}
done < <("$LIAR" --list)

trap live_cleanup EXIT

show() { printf '\n--- %s\n%s' "$2" "$(tail -n 20 "$1/$2" | cut -c1-300)"; }

bad_total=0 bytes_total=0 runs=0 skipped=()
shm_snapshot
for c in "${cases[@]}"; do
  [[ -n ${expect[$c]:-} ]] || fail "unknown case '$c' (lying_peer --list)"
  if [[ $c == name-other-user && $(id -u) != 0 ]]; then
    log "case $c: skipped, it needs root to give a segment to another user"
    skipped+=("$c")
    continue
  fi
  d=$TMP/$c
  mkdir -p "$d"
  rm -f "$TMP/ready"
  mkfifo "$TMP/ready"
  shim_at "$d/server.stats"
  R2SOCK_LOG=info "${SHIM_AT[@]}" "$SC" server --host 127.0.0.1 --port 0 --ready-fd 3 --conns 2 \
    --mode block --timeout 90 3>"$TMP/ready" >"$d/server.log" 2>&1 &
  spid=$!
  LIVE=("$spid")
  port=
  read -r -t 20 port <"$TMP/ready" || true
  [[ -n $port ]] || fail "case $c: the server reported no port: $(cat "$d/server.log")"
  shim_at "$d/honest.stats"
  "${SHIM_AT[@]}" "$SC" client --host 127.0.0.1 --port "$port" --mode block --bytes 16M --bidir \
    --seed "$((500 + ${index[$c]}))" --timeout 90 >"$d/honest.log" 2>&1 &
  hpid=$!
  LIVE+=("$hpid")
  liar_args=(--port "$port" --case "$c" --timeout 90)
  [[ $c == stall-credits ]] && liar_args+=(--go-file "$d/go" --watch-pid "$spid")
  [[ $c == handed-* ]] && liar_args+=(--watch-pid "$spid")
  "${PLAIN[@]}" "$LIAR" "${liar_args[@]}" >"$d/liar.log" 2>&1 &
  lpid=$!
  LIVE+=("$lpid")
  shm_note_pid "$lpid"

  hrc=0
  wait "$hpid" || hrc=$?
  touch "$d/go" # the honest connection is done: stall-credits may measure now
  lrc=0
  wait "$lpid" || lrc=$?
  src=0
  wait "$spid" || src=$?
  LIVE=()
  runs=$((runs + 1))

  ctx="$(show "$d" liar.log)$(show "$d" server.log)$(show "$d" honest.log)"
  ! grep -Eq "$SAN_RE" "$d"/*.log || fail "case $c: a sanitizer report:$ctx"
  ((lrc == 0)) || fail "case $c: the liar exited with $lrc (expected outcome ${expect[$c]}):$ctx"
  ((hrc == 0)) || fail "case $c: the honest client failed (status $hrc) next to the liar:$ctx"
  grep -q '^stream_check client: OK' "$d/honest.log" || fail "case $c: the honest client did not report OK:$ctx"
  # The honest connection kept its shared-memory path: one line with path=shm
  # besides the liar's own (which may be shm too, before its lie).
  nshm=$(grep -c 'info: conn .* server .* path=shm' "$d/server.log" || true)
  ((nshm >= 1)) || fail "case $c: no server connection ended on shared memory (the honest one should):$ctx"
  if [[ $SHM_CASES == *" $c "* ]]; then
    ((nshm == 2)) || fail "case $c: expected the liar's connection on shared memory too ($nshm server connections were):$ctx"
  fi
  if [[ $c == fetch-* || $c == handed-* ]]; then
    byfd=$(sed -n 's/.* rings_by_fd=\([0-9]*\).*/\1/p' "$d/server.stats")
    [[ ${byfd:-none} == "${BY_FD[$c]:-0}" ]] ||
      fail "case $c: expected the server's rings_by_fd=${BY_FD[$c]:-0}, its stats say ${byfd:-nothing}:$ctx"
  fi
  errs=$(grep -E '^stream_check server: conn [0-9]+: ' "$d/server.log" || true)
  nerr=$(grep -c . <<<"$errs" || true)
  [[ -n $errs ]] || nerr=0
  if [[ ${expect[$c]} == verified ]]; then
    ((src == 0 && nerr == 0)) || fail "case $c: the server failed (status $src) where the liar's stream should pass:$ctx"
    if [[ -n ${REASON[$c]:-} ]]; then
      grep -q "path=tcp (${REASON[$c]})" "$d/server.log" ||
        fail "case $c: expected the liar's connection on path=tcp (${REASON[$c]}):$ctx"
    fi
  else
    ((src == 1 && nerr == 1)) ||
      fail "case $c: expected the server to exit 1 with one failed connection, got status $src and $nerr:$ctx"
    [[ $errs =~ (Connection\ reset\ by\ peer|Broken\ pipe|premature\ EOF) ]] ||
      fail "case $c: the server's error is not a reset, broken pipe or EOF: $errs$ctx"
    if [[ $EOF_CASES != *" $c "* ]]; then
      grep -q 'warning: connection reset: ' "$d/server.log" ||
        fail "case $c: no 'connection reset:' warning from the shim for a protocol error:$ctx"
    fi
  fi
  line=$(grep '^lying_peer: case ' "$d/liar.log" | tail -n 1)
  bad=$(sed -n 's/.* bad_inputs=\([0-9]*\).*/\1/p' <<<"$line")
  ver=$(sed -n 's/.* verified=\([0-9]*\).*/\1/p' <<<"$line")
  hver=$(sed -n 's/.* verified=\([0-9]*\).*/\1/p' "$d/honest.log")
  bad_total=$((bad_total + ${bad:-0}))
  bytes_total=$((bytes_total + ${ver:-0} + ${hver:-0}))
  log "case $c: ${expect[$c]} as expected; server status $src;" \
    "$(grep -o 'stalled server used.*' "$d/liar.log" || true)${errs:+ server: ${errs#stream_check server: }}"
done
((runs > 0)) || skip "no case could run here (skipped: ${skipped[*]})"
shm_check_leaks
log "lying peer: $runs runs, $bad_total bad inputs tried, $bytes_total bytes verified (client side), nothing lost"
log PASS

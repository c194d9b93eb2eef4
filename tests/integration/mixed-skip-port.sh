#!/usr/bin/env bash
# R2SOCK_SKIP_PORTS: a client under the shim talks to a plain server of the
# telnet era, one that reads urgent data inline (SO_OOBINLINE set before
# listen(), tests/integration/oob_peer.py). The client sends A+B (20000 +
# 30000 bytes) and never uses urgent data itself.
#   skipped: the server's port is in R2SOCK_SKIP_PORTS: the shim sends no
#            hello, so the server reads exactly A+B with no mark, and the
#            client's end is counted as tcp_disabled.
#   program: R2SOCK_SKIP_PORTS=none, and R2SOCK_SKIP_PROGRAMS names the
#            client's executable as the kernel links it (python3.11, where
#            the command is python3): the same as skipped.
#   control: R2SOCK_SKIP_PORTS=none: under R2SOCK_UPGRADE=now the hello is
#            read inline as one extra byte before A+B (the harm the list
#            exists to prevent, docs/protocol.md "What a plain peer sees");
#            under never there is no hello and the bytes are exact.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

PEER=$(dirname "$0")/oob_peer.py
NA=20000 NB=30000
SHIM=()
hello=0
[[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]] && hello=1

shm_snapshot
# The executable's file name, as /proc/self/exe gives it: past symlinks.
exe=$(basename "$(readlink -f "$(command -v "$PY")")")
for run in skipped program control; do
  port=$(free_port)
  skip=$port programs=rsync
  [[ $run != skipped ]] && skip=none
  [[ $run == program ]] && programs=$exe
  shim_at "$TMP/$run.stats"
  start_server "oob-$run" "$port" "${PLAIN[@]}" "$PY" "$PEER" server --port "$port" --out "$TMP/$run.got" --inline
  run_to "$TMP/client-$run.out" 40 "${SHIM_AT[@]}" R2SOCK_SKIP_PORTS="$skip" R2SOCK_SKIP_PROGRAMS="$programs" "$PY" "$PEER" client --port "$port" \
    --seed 7 --a-bytes "$NA" --b-bytes "$NB" --no-urgent --sent-normal "$TMP/$run.sent" --sent-inline /dev/null
  wait_server "oob-$run" 40
  got=$(grep '^oob_peer server:' "$TMP/oob-$run.log" || true)
  extra=0
  [[ $run == control ]] && extra=$hello
  marks="[]"
  ((extra)) && marks="[0]"
  want="oob_peer server: oobinline=1 oob=[] marks=$marks after=EINVAL in_band=$((NA + NB + extra))"
  [[ $got == "$want" ]] || fail "$run: the plain server observed '$got', expected '$want'"
  # What follows the hello, if any, is exactly what the client sent.
  tail -c +$((extra + 1)) "$TMP/$run.got" >"$TMP/$run.data"
  same_file "$TMP/$run.sent" "$TMP/$run.data"
  log "$run (R2SOCK_SKIP_PORTS=$skip R2SOCK_SKIP_PROGRAMS=$programs): the plain server observed: ${got#oob_peer server: }"
  if [[ -n $R2SOCK_LIB ]]; then
    # One direction only: check_stats's bytes= wants both; tx is checked here.
    check_tcp_only "$TMP/$run.stats" conns=1 bulk=0 bytes=0 procs=1
    tx=$(STATS=$TMP/$run.stats stats_sum bytes_tcp_tx)
    ((tx == NA + NB)) || fail "$run: bytes_tcp_tx=$tx in the client's stats, expected $((NA + NB))"
    disabled=$(STATS=$TMP/$run.stats stats_sum tcp_disabled)
    # Skipped, or upgrades off altogether; else the plain peer's silence.
    want_disabled=1
    [[ $run == control ]] && want_disabled=$((1 - hello))
    ((disabled == want_disabled)) || fail "$run: tcp_disabled=$disabled in the client's stats, expected $want_disabled"
  fi
done
shm_check_leaks
log PASS

#!/usr/bin/env bash
# epoll reports connections in the order their bytes came, as the kernel
# does (tests/integration/epoll_order.py): 8 connections, 20 rounds, each
# round a byte on every connection in a random order, then one
# epoll_wait that must list them in that order. The shim looked at the
# rings in the order of its own list and reported them so: redis's own
# test suite (a command on one connection, then without waiting one on
# another that must see its effect) failed "PUBLISH/PSUBSCRIBE after
# PUNSUBSCRIBE without arguments" 6 runs of 6 under R2SOCK_UPGRADE=now.
# Asserted: the order in every round, and under an upgrading policy all
# 16 connection ends on shared memory (the order is the rings').
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
r2s_python
run 60 "$PY" "$(dirname "$0")/epoll_order.py" --conns 8 --rounds 20 >"$TMP/out"
cat "$TMP/out" >&2
grep -q "^epoll_order: OK " "$TMP/out" || fail "epoll_order did not report OK"
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-auto} != never ]]; then
  shm=$(stats_sum conn_shm)
  ((shm == 16)) || fail "expected all 16 connection ends on shared memory, saw conn_shm=$shm"
fi
log PASS

#!/usr/bin/env bash
# An application that closes the descriptors from 512 up (close_range, as a
# daemon's clean-up does) and takes their numbers back for sockets of its
# own, while its connections are open and right after it closed them
# (tests/progs/fd_takeover.c: none of its sockets may be written to, read
# from, shut down or closed by the shim, and every byte both ways is
# compared). The shim finishes an upgraded connection's close in the
# background through a duplicate of its socket at 512 or above (reaper.h):
# before the fix that duplicate's number, taken back by the application,
# was read from (the byte waiting there was lost) and then closed. The shm
# variant also asserts that all 4 connection ends were on shared memory and
# that closes did go to the background; the RDMA transport's own duplicate
# is checked by the same program in tests/rxe/guest-smoke.sh.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
FT=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/fd_takeover
[[ -x $FT ]] || fail "fd_takeover not built: expected it at $FT (set R2SOCK_BUILD to the build dir)"

run 60 "$FT" 127.0.0.1 2 >"$TMP/out"
cat "$TMP/out" >&2
grep -q '^fd_takeover: PASS' "$TMP/out" || fail "fd_takeover did not report PASS"
if [[ -n $R2SOCK_LIB && ${R2SOCK_UPGRADE:-never} != never ]]; then
  shm=$(stats_sum conn_shm) reaped=$(stats_sum closes_reaped)
  log "conn_shm=$shm closes_reaped=$reaped"
  ((shm == 4)) || fail "expected all 4 connection ends on shared memory, saw conn_shm=$shm"
  ((reaped >= 1)) || fail "expected closes finished in the background (closes_reaped >= 1), saw $reaped"
fi
log PASS

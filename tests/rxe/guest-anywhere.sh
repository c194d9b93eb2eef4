#!/bin/bash
# rxe.anywhere, inside ONE guest (scripts/rxe/run-guest): the suite runs
# from a checkout anywhere on the host, /tmp included (where many clone to
# try something). rxe-test copied what the guest runs (scripts/rxe, this
# directory, the library and the stream checker) into a fresh directory
# under the host's /tmp and booted the guest from that copy:
#   1. this script and guest-lib.sh were found there (the guest reached
#      here), and the copy is where the guest runs them from
#   2. through the copy's library, with R2SOCK_TRANSPORT=rdma, one stream
#      checker connection moves 8 MiB each way, bytes verified, and both
#      processes upgraded it to RDMA (stats)
#   3. the guest's writes to /tmp stay in the guest: the host's /tmp is
#      read-only below the guest's overlay
set -uo pipefail
. "${R2S_RXE_TOOLS:?not inside an rxe guest}/guest-lib.sh"
IP=$MY_IP
here=$(cd "$(dirname "$0")" && pwd)

from_copy() { [[ $here == /tmp/r2s-anywhere.* && $R2S_RXE_TOOLS == "${here%/tests/rxe}/scripts/rxe" ]]; }
step "runs from the copy under /tmp ($here)" from_copy

if [ -n "${R2SOCK_LIB:-}" ]; then
  SC=$(printf %q "$R2SOCK_BUILD/tests/progs/stream_check")
  st=/xfer/stats.anywhere
  env=(env "LD_PRELOAD=$R2SOCK_LIB" R2SOCK_UPGRADE=now R2SOCK_TRANSPORT=rdma R2SOCK_STATS=1 "R2SOCK_STATS_FILE=$st")
  pre=$(printf '%q ' "${env[@]}")
  serve_and_connect anywhere 7000 "$pre $SC server --host $IP --port 7000 --once --timeout 60" \
    "$pre $SC client --host $IP --port 7000 --bytes 8M --bidir --timeout 60"
  step "anywhere: both processes upgraded to RDMA" r2s_stats_check "$st" 2 conn_rdma 1
else
  skip "anywhere-stream" "R2SOCK_LIB is empty (library not built)"
fi

scratch_private() {
  local f
  f=$(mktemp /tmp/r2s-guest.XXXXXX) && echo guest > "$f" && [ "$(cat "$f")" = guest ] &&
    echo "$f" > /xfer/anywhere.scratch
}
step "a scratch file in /tmp" scratch_private
finish

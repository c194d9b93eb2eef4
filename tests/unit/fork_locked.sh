#!/bin/bash
# fork_locked.c under the test build of the module: both connections of
# each round on shared memory.
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
prog=$1 lib=$2
r2s_preload_for "$lib"
# A child of a process with threads is what this test makes, on purpose:
# the holder thread is the parent's, not a leak of the child's.
export TSAN_OPTIONS=${TSAN_OPTIONS:-die_after_fork=0 report_thread_leaks=0}
timeout 100 env LD_PRELOAD="$preload" R2SOCK_UPGRADE=now R2SOCK_TRANSPORT=shm "$prog"

#!/usr/bin/env bash
# poisoned_io.sh PROG LIB: in an ASan build, the shim refuses to move bytes
# from or into a poisoned application buffer (src/sanitize.h). ASan's own
# send/recv interceptors are turned off, so only the shim's check can stop
# the program; without the shim (the control run) nothing does.
set -euo pipefail
prog=$1 lib=$2
# shellcheck source=tests/preload.sh
source "$(dirname "$0")/../preload.sh"
r2s_preload "$lib"
[[ $R2S_SANITIZER_RT == *libasan* ]] || { echo "not an ASan build of $lib"; exit 77; }
export ASAN_OPTIONS=intercept_send=0:intercept_recv=0:detect_leaks=0
for dir in send recv; do
  out=$("$prog" "$dir" 2>&1) || { echo "control run ($dir, no shim) failed: $out"; exit 1; }
  rc=0
  out=$(LD_PRELOAD="$R2S_PRELOAD" R2SOCK_UPGRADE=now timeout 30 "$prog" "$dir" 2>&1) || rc=$?
  if ((rc == 0)) || ! grep -q 'r2sock: the application handed over a buffer with poisoned bytes' <<<"$out"; then
    echo "FAIL: $dir from a poisoned buffer under the shim: status $rc, output: $out"
    exit 1
  fi
  echo "$dir: stopped by the shim (status $rc): $(grep -m1 'poisoned bytes' <<<"$out")"
done

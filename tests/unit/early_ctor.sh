#!/bin/bash
# The first interposed calls come before the shim's own constructor ran
# (preinit_array) and from another library's constructor, with a second
# thread racing them; options must still be read from the environment.
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
prog=$1 lib=$2
r2s_preload_for "$lib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# timeout runs outside the preload, so every line comes from the program.
timeout 30 env LD_PRELOAD="$preload" R2SOCK_LOG=debug R2SOCK_STATS_FILE="$tmp/stats" "$prog" 2>"$tmp/err" >"$tmp/out" || {
  echo "early_ctor failed:"; cat "$tmp/err"; exit 1; }
grep -q "early_ctor: ok" "$tmp/out"
# The shim must have been started by the preinit code's first call, not by
# its own constructor: otherwise this test did not test what it says.
if ! grep -q "debug: ready (started by the first interposed call)" "$tmp/err"; then
  echo "expected the shim to start from an early wrapper call; stderr was:"; cat "$tmp/err"; exit 1
fi
line=$(cat "$tmp/stats")
echo "$line"
# Both ends of both early connections are in this process.
grep -q " conn_seen=4 " <<<"$line" || { echo "expected conn_seen=4"; exit 1; }
# Both ends are in one process, so the connections may take any path.
rx=0
for k in bytes_tcp_rx bytes_shm_rx bytes_rdma_rx; do
  rx=$((rx + $(sed -n "s/.* $k=\([0-9]*\).*/\1/p" <<<"$line")))
done
[ "$rx" -ge 2097152 ] || { echo "expected >= 2 MiB received on tracked connections, got $rx"; exit 1; }
echo "early_ctor: ok"

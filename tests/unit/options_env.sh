#!/bin/bash
# Options as a user meets them: a bad value warns once, naming the variable,
# and keeps the default; VERBOSE prints every option; by default the shim
# says nothing at all.
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
lib=$1
r2s_preload_for "$lib"
out=$(LD_PRELOAD="$preload" /bin/true 2>&1)
[ -z "$out" ] || { echo "expected silence by default, got: $out"; exit 1; }
out=$(LD_PRELOAD="$preload" R2SOCK_UPGRADE=sometimes /bin/true 2>&1)
grep -q "R2SOCK_UPGRADE=sometimes is not valid" <<<"$out" || { echo "no warning for a bad value: $out"; exit 1; }
[ "$(grep -c . <<<"$out")" = 1 ] || { echo "expected one warning line, got: $out"; exit 1; }
out=$(LD_PRELOAD="$preload" R2SOCK_VERBOSE=1 R2SOCK_UPGRADE=sometimes R2SOCK_TYPO=1 /bin/true 2>&1)
for name in LOG VERBOSE STATS STATS_FILE UPGRADE; do
  grep -q "option R2SOCK_$name " <<<"$out" || { echo "VERBOSE did not print $name: $out"; exit 1; }
done
grep -q "option R2SOCK_UPGRADE *= auto *(default)" <<<"$out" || { echo "bad value did not keep the default: $out"; exit 1; }
grep -q "R2SOCK_TYPO is not an option" <<<"$out" || { echo "unknown option not listed: $out"; exit 1; }
out=$(LD_PRELOAD="$preload" R2SOCK_VERBOSE=1 R2SOCK_UPGRADE=64K /bin/true 2>&1)
grep -q "option R2SOCK_UPGRADE *= after 65536 bytes (environment)" <<<"$out" || { echo "64K not parsed: $out"; exit 1; }
echo "options_env: ok"

# shellcheck shell=bash
# Sourced by the unit scripts that preload the module: a sanitizer build of
# the module needs its runtime first in LD_PRELOAD (tests/preload.sh), and
# the shim's process-long allocations (option strings) are not leaks worth
# reporting. Sets $preload for: LD_PRELOAD="$preload" program...
# shellcheck source=tests/preload.sh
source "$(dirname "${BASH_SOURCE[0]}")/../preload.sh"
# shellcheck disable=SC2034 # preload is for the caller
r2s_preload_for() {
  r2s_preload "$1"
  preload=$R2S_PRELOAD
  [ -z "$R2S_SANITIZER_RT" ] || export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
}

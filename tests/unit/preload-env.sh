# Sourced by the unit scripts that preload the module: a sanitizer build of
# the module needs its runtime first in LD_PRELOAD, and the shim's
# process-long allocations (option strings) are not leaks worth reporting.
# Sets $preload for: LD_PRELOAD="$preload" program...
r2s_preload_for() {
  local lib=$1 rt
  rt=$(ldd "$lib" 2>/dev/null | awk '/lib(asan|tsan)\.so/ {print $3; exit}')
  preload=${rt:+$rt }$lib
  [ -z "$rt" ] || export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
}

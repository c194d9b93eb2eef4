# shellcheck shell=bash
# What goes in LD_PRELOAD to run a program under a build of the shim, for
# every test script that preloads it (tests/integration/lib.sh, and through
# it tests/hostile; tests/progs/run-pair.sh; tests/unit/preload-env.sh;
# tests/unit/poisoned_io.sh; tests/rxe/guest-liar.sh). Sourced; not a test.
#
# r2s_preload LIB sets
#   R2S_SANITIZER_RT  the sanitizer runtime (libasan, libtsan) LIB is linked
#                     with; empty for a build without a sanitizer
#   R2S_PRELOAD       the value for LD_PRELOAD: that runtime, then LIB, as
#                     r2sock-run preloads it (a link when its path has a
#                     blank or a colon, which the loader would split at:
#                     scripts/r2sock-preload.sh)
# A sanitizer's runtime must be first in the process's initial library
# list; a program built without it does not load it at all, so it is
# preloaded ahead of the shim. What each suite then sets in ASAN_OPTIONS or
# TSAN_OPTIONS is its own (the programs it runs differ).
# shellcheck source=scripts/r2sock-preload.sh
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/r2sock-preload.sh"
# shellcheck disable=SC2034 # R2S_PRELOAD is for the caller
r2s_preload() {
  local path
  R2S_SANITIZER_RT=$(ldd "$1" 2>/dev/null | awk '/lib[at]san\.so/ { print $3; exit }') || R2S_SANITIZER_RT=
  path=$(r2s_preload_path "$1") || return 1
  R2S_PRELOAD=${R2S_SANITIZER_RT:+$R2S_SANITIZER_RT:}$path
}

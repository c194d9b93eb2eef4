# shellcheck shell=bash
# Sourced by the scripts that check a document against the code: the README
# and the manual pages must list exactly what the library and the launcher
# have, so that neither can drift.

# r2s_library_options LIB: the R2SOCK_* names the library prints with
# R2SOCK_VERBOSE=1, sorted (its options table, as the library sees it).
r2s_library_options() {
  local preload
  # shellcheck source=tests/unit/preload-env.sh
  source "$(dirname "${BASH_SOURCE[0]}")/preload-env.sh"
  r2s_preload_for "$1"
  LD_PRELOAD="$preload" R2SOCK_VERBOSE=1 /bin/true 2>&1 | sed -n 's/.*option \(R2SOCK_[A-Z_]*\) .*/\1/p' | sort
}

# r2s_same_list WHAT CODE DOC: succeeds when the two sorted lists are equal
# and not empty; otherwise prints the difference (< code, > document).
r2s_same_list() {
  local what=$1 code=$2 doc=$3
  [ -n "$code" ] || { echo "$what: the code lists nothing"; return 1; }
  [ "$code" != "$doc" ] || return 0
  echo "$what differs (< code, > document):"
  diff <(echo "$code") <(echo "$doc") || true
  return 1
}

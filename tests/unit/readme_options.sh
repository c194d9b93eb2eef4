#!/bin/bash
# The README's options table lists exactly the options the library has.
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
lib=$1 readme=$2
r2s_preload_for "$lib"
code=$(LD_PRELOAD="$preload" R2SOCK_VERBOSE=1 /bin/true 2>&1 | sed -n 's/.*option \(R2SOCK_[A-Z_]*\) .*/\1/p' | sort)
doc=$(sed -n '/^### Options/,/^### /p' "$readme" | sed -n 's/^| `\(R2SOCK_[A-Z_]*\)`.*/\1/p' | sort)
[ -n "$code" ] || { echo "the library printed no options"; exit 1; }
if [ "$code" != "$doc" ]; then
  echo "README options table differs from the library (< library, > README):"
  diff <(echo "$code") <(echo "$doc") || true
  exit 1
fi
echo "readme_options: $(echo "$code" | wc -l) options, README matches"

#!/bin/bash
# The README's options table lists exactly the options the library has.
set -euo pipefail
# shellcheck source=tests/unit/doc-lists.sh
source "$(dirname "$0")/doc-lists.sh"
lib=$1 readme=$2
code=$(r2s_library_options "$lib")
doc=$(sed -n '/^### Options/,/^### /p' "$readme" | sed -n 's/^| `\(R2SOCK_[A-Z_]*\)`.*/\1/p' | sort)
r2s_same_list "README options table" "$code" "$doc"
echo "readme_options: $(echo "$code" | wc -l) options, README matches"

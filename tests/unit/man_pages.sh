#!/bin/bash
# The manual pages format without a warning, r2sock(7) lists exactly the
# options the library has, and r2sock-run(1) exactly the launcher's options.
#   man_pages.sh LIB MANDIR LAUNCHER
set -euo pipefail
# shellcheck source=tests/unit/doc-lists.sh
source "$(dirname "$0")/doc-lists.sh"
lib=$1 mandir=$2 launcher=$3
command -v groff >/dev/null || { echo "SKIP: groff is not installed (apt-get install groff-base)"; exit 77; }

n=0
for page in "$mandir"/*.[0-9]; do
  n=$((n + 1))
  # -ww: every warning; -z: no output. groff exits 0 on warnings, so the
  # messages themselves are the verdict.
  msgs=$(groff -man -ww -z "$page" 2>&1)
  [ -z "$msgs" ] || { echo "groff warns about $page:"; echo "$msgs"; exit 1; }
  if command -v man >/dev/null; then
    msgs=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
    [ -z "$msgs" ] || { echo "man warns about $page:"; echo "$msgs"; exit 1; }
  fi
done
echo "man_pages: $n pages format cleanly"

# The first argument of the macro line after each .TP in section $2 of page $1.
tagged() {
  awk -v sec="$2" '/^\.SH / { on = ($2 == sec) } on && prev == ".TP" { print } { prev = $0 }' "$1"
}

code=$(r2s_library_options "$lib")
doc=$(tagged "$mandir/r2sock.7" ENVIRONMENT | sed -n 's/^\.B \(R2SOCK_[A-Z_]*\)$/\1/p' | sort)
r2s_same_list "r2sock(7) ENVIRONMENT against the library's options" "$code" "$doc"
echo "man_pages: r2sock(7) lists the library's $(echo "$code" | wc -l) options"

code=$("$launcher" --help | grep -E '^  +-' | grep -oE -- '--[a-z][a-z-]*' | sort -u)
doc=$(tagged "$mandir/r2sock-run.1" OPTIONS | sed 's/\\-/-/g' | grep -oE -- '--[a-z][a-z-]*' | sort -u)
r2s_same_list "r2sock-run(1) OPTIONS against r2sock-run --help" "$code" "$doc"
echo "man_pages: r2sock-run(1) lists the launcher's $(echo "$code" | wc -l) options"

#!/bin/bash
# The module must export exactly the names listed in exports.map: nothing of
# the engine leaks into the application's symbol namespace, and no wrapper
# silently stops interposing.
set -euo pipefail
lib=$1 map=$2
want=$(sed -n '/global:/,/local:/p' "$map" | sed 's,/\*.*\*/,,; s/global://; s/local:.*//' |
  tr ';' '\n' | tr -d ' \t' | grep -v '^$' | sort)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwiI]$/ {print $3}' | sed 's/@.*//' | sort)
if [ "$want" != "$have" ]; then
  echo "exports differ from $map (< map, > library):"
  diff <(echo "$want") <(echo "$have") || true
  exit 1
fi
# Every name must also be a real libc function, or it interposes nothing.
libc=$(ldd /bin/true | awk '/libc.so/ {print $3}')
libc_names=$(nm -D --defined-only "$libc" | awk '{print $3}' | sed 's/@.*//' | sort -u)
missing=0
for f in $want; do
  if ! grep -qx "$f" <<<"$libc_names"; then echo "exported $f is not a libc function"; missing=1; fi
done
[ $missing = 0 ]
echo "exports: $(echo "$want" | wc -l) names, identical to the map and all in libc"

#!/bin/bash
# r2sock-run: each option sets the variable it documents, the program is
# exec'd (its pid, exit status and signals are its own), usage errors exit 2,
# the installed layout finds its library, and --check's exit status says
# whether the library loads.
#   launcher.sh LAUNCHER LIB
set -euo pipefail
launcher=$1 lib=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/r2s-launcher.XXXXXX")
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() { "$launcher" --lib "$lib" "$@"; }

# flag value variable=value: every option of --help that sets a variable.
cases=(
  "--upgrade now R2SOCK_UPGRADE=now"
  "--upgrade=64K - R2SOCK_UPGRADE=64K"
  "--peer-shim - R2SOCK_PEER_SHIM=1"
  "--transport rdma R2SOCK_TRANSPORT=rdma"
  "--device rxe0 R2SOCK_DEVICE=rxe0"
  "--gid-index 3 R2SOCK_GID_INDEX=3"
  "--ring-size 1M R2SOCK_RING_SIZE=1M"
  "--spin-us 7 R2SOCK_SPIN_US=7"
  "--log debug R2SOCK_LOG=debug"
  "--verbose - R2SOCK_VERBOSE=1"
  "-v - R2SOCK_VERBOSE=1"
  "--stats - R2SOCK_STATS=1"
  "--stats-file /x/s R2SOCK_STATS_FILE=/x/s"
  "--config /x/r.conf R2SOCK_CONFIG=/x/r.conf"
)
tested=""
for c in "${cases[@]}"; do
  read -r flag val want <<<"$c"
  args=("$flag"); [ "$val" = - ] || args+=("$val")
  got=$(run "${args[@]}" -- env 2>/dev/null | grep "^${want%%=*}=") || true
  [ "$got" = "$want" ] || fail "r2sock-run ${args[*]}: expected $want in the program's environment, saw '${got:-nothing}'"
  tested="$tested ${flag%%=*}"
done
# Every option of --help that is not about the launcher itself is covered.
for opt in $("$launcher" --help | grep -E '^  +-' | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
  # (--explain and its --peer, --user, --lport: tests/unit/rules_check.sh)
  case $opt in --lib|--check|--help|--explain|--peer|--user|--lport) continue ;; esac
  [[ " $tested " == *" $opt "* ]] || fail "option $opt of --help has no case in this test"
done
echo "launcher: ${#cases[@]} option cases set their variables"

# The library goes first in LD_PRELOAD, by absolute path; the old list stays.
got=$(cd "$(dirname "$lib")" && LD_PRELOAD=libfoo.so "$launcher" --lib "./$(basename "$lib")" -- env 2>/dev/null | grep '^LD_PRELOAD=')
# (a sanitizer build's runtime must come first of all: the launcher puts it there)
san_rt=
[[ $got == LD_PRELOAD=*/lib*san.so* ]] && san_rt=$(echo "${got#LD_PRELOAD=}" | cut -d' ' -f1)' '
# (a checkout at a path with a blank is preloaded through a link: r2sock-preload.sh)
# shellcheck source=scripts/r2sock-preload.sh
. "$(dirname "$launcher")/r2sock-preload.sh"
want_lib=$(r2s_preload_path "$(readlink -f "$lib")")
[[ $got == "LD_PRELOAD=$san_rt$want_lib"*" libfoo.so" ]] || fail "expected LD_PRELOAD=<absolute lib> ... libfoo.so, saw $got"

# A library whose path has a blank or a colon, which the loader would split
# at: the program gets it through a link whose path has neither, and the
# library is loaded (it prints its options).
mkdir -p "$tmp/a b:c"
cp "$lib" "$tmp/a b:c/"
spaced=$tmp/a\ b:c/$(basename "$lib")
got=$(env -u LD_PRELOAD "$launcher" --lib "$spaced" -- env | grep '^LD_PRELOAD=')
link=${got##* }
link=${link#LD_PRELOAD=}
[[ $link != *[[:space:]:]* && $(readlink "$link") == "$spaced" ]] ||
  fail "--lib '$spaced': expected LD_PRELOAD to end with a link to it without blanks or colons, saw $got"
out=$(env -u LD_PRELOAD "$launcher" --lib "$spaced" --verbose -- /bin/true 2>&1)
grep -q 'option R2SOCK_UPGRADE' <<<"$out" || fail "--lib '$spaced': the library did not load: $out"
out=$(LD_PRELOAD=$spaced "$launcher" --lib "$lib" -- /bin/true 2>&1)
grep -q 'warning: LD_PRELOAD=.* blank or a colon' <<<"$out" ||
  fail "a caller's LD_PRELOAD naming one file with a blank: expected a warning, saw '$out'"
echo "launcher: a library at a path with a blank and a colon loads through a link; a caller's such LD_PRELOAD is named"
got=$(cd "$tmp" && run --stats-file rel.stats -- env | grep '^R2SOCK_STATS_FILE=')
[ "$got" = "R2SOCK_STATS_FILE=$tmp/rel.stats" ] || fail "a relative --stats-file must become $tmp/rel.stats, saw $got"
got=$(cd "$tmp" && run --config rel.conf -- env | grep '^R2SOCK_CONFIG=')
[ "$got" = "R2SOCK_CONFIG=$tmp/rel.conf" ] || fail "a relative --config must become $tmp/rel.conf, saw $got"

# exec: same pid, the program's exit status, death by the program's signal.
# shellcheck disable=SC2016 # $$ is the program's
"$launcher" --lib "$lib" -- sh -c 'echo $$ >"$0"; exec sleep 30' "$tmp/pid" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/pid" ] && break; sleep 0.05; done
[ "$(cat "$tmp/pid")" = "$pid" ] || fail "the program's pid $(cat "$tmp/pid") is not the launcher's $pid"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
[ $rc = 143 ] || fail "a program killed by SIGTERM must end the launcher's status as 143, saw $rc"
rc=0; run -- sh -c 'exit 7' || rc=$?
[ $rc = 7 ] || fail "expected the program's exit status 7, saw $rc"
echo "launcher: exec keeps pid, exit status and signal"

# Usage errors.
for bad in "--nope" "--upgrade" "--transport tcp" "--stats=1" "--check true" "-- /nonexistent/prog" ""; do
  rc=0
  # shellcheck disable=SC2086 # each case is several words
  run $bad </dev/null >/dev/null 2>"$tmp/err" || rc=$?
  [ $rc = 2 ] || fail "r2sock-run $bad: expected exit status 2, saw $rc"
  [ -s "$tmp/err" ] || fail "r2sock-run $bad: expected a message on stderr"
done
echo "launcher: usage errors exit 2 with a message"

# The installed layout: <prefix>/bin/r2sock-run finds <prefix>/lib/r2sock/,
# also when reached through a symbolic link.
mkdir -p "$tmp/p/bin" "$tmp/p/lib/r2sock" "$tmp/links"
cp "$launcher" "$tmp/p/bin/r2sock-run"
cp "$(dirname "$launcher")/r2sock-check" "$(dirname "$launcher")/r2sock-preload.sh" "$lib" "$(dirname "$lib")/r2sock-rules" "$tmp/p/lib/r2sock/"
ln -s "$tmp/p/bin/r2sock-run" "$tmp/links/r2sock-run"
got=$(env -u LD_PRELOAD "$tmp/links/r2sock-run" -- env | grep '^LD_PRELOAD=')
[[ $got == "LD_PRELOAD=$tmp/p/lib/r2sock/$(basename "$lib")" || $got == "LD_PRELOAD="*" $tmp/p/lib/r2sock/$(basename "$lib")" ]] ||
  fail "installed launcher: expected LD_PRELOAD of $tmp/p/lib/r2sock/..., saw $got"
"$tmp/links/r2sock-run" --check >"$tmp/check.out" ||
  { cat "$tmp/check.out"; fail "--check of the installed layout: expected exit 0"; }
grep -q "found $tmp/p/lib/r2sock/" "$tmp/check.out" || fail "--check did not report the installed library"
grep -q "ok    loads" "$tmp/check.out" || fail "--check did not report that the library loads"
grep -q "ok    rules file: no bad line" "$tmp/check.out" || fail "--check did not check the rules file"
echo "launcher: an installed copy finds its library and --check passes"

# --check: 3 when the library is missing or is not r2sock.
for l in "$tmp/none.so" /bin/sh; do
  rc=0; "$launcher" --lib "$l" --check >"$tmp/check.out" || rc=$?
  [ $rc = 3 ] || fail "--check --lib $l: expected exit status 3, saw $rc"
  grep -q FAIL "$tmp/check.out" || fail "--check --lib $l: expected a FAIL line"
done
rm "$tmp/p/lib/r2sock/$(basename "$lib")"
rc=0; "$tmp/p/bin/r2sock-run" --check >"$tmp/check.out" || rc=$?
[ $rc = 3 ] || fail "--check without a library: expected exit status 3, saw $rc"
grep -q "libr2sock.so not found" "$tmp/check.out" || fail "--check without a library: expected 'not found'"
# 4: RDMA asked for where there is no device.
if [ -z "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  rc=0; run --transport rdma --check >/dev/null || rc=$?
  [ $rc = 4 ] || fail "--check --transport rdma without an RDMA device: expected exit status 4, saw $rc"
fi
echo "launcher: --check exit statuses hold"
echo PASS

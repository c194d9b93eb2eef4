#!/bin/bash
# The rules file as a user checks it: `r2sock-run --check` lists each bad
# line with its number and exits 5, `--check --explain PROGRAM PORT` names
# the rule (file:line) a connection hits and what it decides (first match,
# the skip lists first, --peer/--user/--lport, the defaults when none
# matches, R2SOCK_UPGRADE=never over every rule), and the library itself
# warns once per bad line, with its number, and otherwise stays silent.
#   rules_check.sh LAUNCHER LIB
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
launcher=$1 lib=$2
r2s_preload_for "$lib"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/r2s-rules-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ ! -s "$tmp/out" ] || sed 's/^/  | /' "$tmp/out"; exit 1; }
# check ARGS...: r2sock-run --lib LIB ARGS..., output in $tmp/out; sets rc.
check() { rc=0; "$launcher" --lib "$lib" "$@" >"$tmp/out" 2>&1 || rc=$?; }
has() { grep -qF -- "$1" "$tmp/out" || fail "expected '$1' in the output of: $2"; }
status() { [ "$rc" = "$1" ] || fail "expected exit status $1, saw $rc: $2"; }
unset R2SOCK_UPGRADE R2SOCK_CONFIG R2SOCK_SKIP_PORTS R2SOCK_SKIP_PROGRAMS

good=$tmp/good.conf
cat >"$good" <<'EOF'
# rules for the test
upgrade = auto
rule upgrade=never port=6379
rule upgrade=now port=6000-7000 transport=shm
rule upgrade=never peer=10.0.0.0/8 lport=8000-8100
rule upgrade=never user=0 program=secret
EOF

# The first rule that matches decides; the next one matches too.
check --config "$good" --check --explain redis-server 6379
status 0 "a good file"
has "ok    $good: 4 rules, 0 bad lines" "a good file"
has "connection: program redis-server, port 6379, local port unknown, peer unknown" "6379"
has "rule: $good:3: rule upgrade=never port=6379" "6379"
has "decision: tcp (the rule at $good:3 says upgrade=never)" "6379"
check --config "$good" --check --explain redis-server 6380
has "rule: $good:4: rule upgrade=now transport=shm port=6000-7000" "6380"
has "decision: upgrade=now transport=shm (the rule at $good:4)" "6380"
# No rule: the defaults, and the rule that could not be judged is named.
check --config "$good" --check --explain app 80
status 0 "no match"
has "unknown: $good:5: rule upgrade=never lport=8000-8100 peer=10.0.0.0/8 (it needs --peer and --lport to decide)" "port 80"
has "rule: none matches" "port 80"
has "decision: upgrade=auto transport=auto (no rule matches: the defaults)" "port 80"
check --config "$good" --check --explain app 80 --lport 8000
has "unknown: $good:5: rule upgrade=never lport=8000-8100 peer=10.0.0.0/8 (it needs --peer to decide)" "--lport"
check --config "$good" --check --explain app 80 --peer ::ffff:10.1.2.3 --lport 8000
has "rule: $good:5: rule upgrade=never lport=8000-8100 peer=10.0.0.0/8" "--peer --lport"
check --config "$good" --check --explain app 80 --peer 11.0.0.1 --lport 8000
has "rule: none matches" "another peer"
check --config "$good" --check --explain secret 80 --user root
has "rule: $good:6: rule upgrade=never program=secret user=0" "--user root"
check --config "$good" --check --explain secret 80 --user 65534
has "rule: none matches" "--user 65534"
# The skip lists come before any rule; R2SOCK_UPGRADE=never before all.
check --config "$good" --check --explain rsync 6379
has "decision: tcp (R2SOCK_SKIP_PROGRAMS lists rsync)" "rsync"
check --config "$good" --check --explain app 873
has "decision: tcp (R2SOCK_SKIP_PORTS lists 873)" "port 873"
R2SOCK_UPGRADE=never check --config "$good" --check --explain app 6380
has "decision: tcp (R2SOCK_UPGRADE=never in the environment" "R2SOCK_UPGRADE=never"
R2SOCK_UPGRADE=now check --config "$good" --check --explain app 80
has "decision: upgrade=now transport=auto (no rule matches: the defaults)" "R2SOCK_UPGRADE=now over the file's auto"
echo "rules_check: --explain names the rule and its decision"

# A bad line: its number and what is wrong, in --check and --explain
# (status 5), and in the library's own stderr, once.
bad=$tmp/bad.conf
cat >"$bad" <<'EOF'
upgrade = auto
rule upgrade=never port=6379
rule upgrade=never prot=22
ring_size = 3000
rule upgrade=now port=6380
EOF
check --config "$bad" --check --explain redis-server 6380
status 5 "--explain with a bad file"
has "WARN  $bad:3: unknown key 'prot' (match keys: program, port, lport, peer, user; actions: upgrade, transport)" "bad file"
has "WARN  $bad:4: RING_SIZE = 3000 is not valid (expected auto, or a power of two from 4K to 1G)" "bad file"
has "WARN  $bad: 2 rules, 2 bad lines" "bad file"
has "rule: $bad:5: rule upgrade=now port=6380" "bad file: the lines after the bad one still apply"
check --config "$good" --check
good_rc=$rc
has "ok    rules file: no bad line" "--check, good file"
check --config "$bad" --check
[ "$good_rc" != 0 ] || status 5 "--check of a bad file (where a good one passes)"
[ "$(grep -c "WARN  $bad:[0-9]" "$tmp/out")" = 2 ] || fail "--check: expected exactly the 2 bad lines, each once"
! grep -q "warning: $bad" "$tmp/out" || fail "--check: the library's own warnings about the file belong to the rules section"
out=$(LD_PRELOAD="$preload" R2SOCK_CONFIG="$bad" /bin/true 2>&1)
[ "$(grep -c . <<<"$out")" = 2 ] || { echo "$out"; fail "the library: expected one warning per bad line, 2 lines"; }
grep -q "^r2sock\[[0-9]*\]: warning: $bad:3: unknown key 'prot' .*; line ignored$" <<<"$out" ||
  { echo "$out"; fail "the library: no warning for line 3"; }
grep -q "^r2sock\[[0-9]*\]: warning: $bad:4: RING_SIZE = 3000 is not valid" <<<"$out" ||
  { echo "$out"; fail "the library: no warning for line 4"; }
out=$(LD_PRELOAD="$preload" R2SOCK_CONFIG="$good" /bin/true 2>&1)
[ -z "$out" ] || fail "the library: expected silence with a good file, got: $out"
# Many bad lines: the library shows a few and counts the rest.
for i in $(seq 1 20); do echo "nonsense $i"; done >"$tmp/many.conf"
out=$(LD_PRELOAD="$preload" R2SOCK_CONFIG="$tmp/many.conf" /bin/true 2>&1)
[ "$(grep -c . <<<"$out")" = 9 ] || { echo "$out"; fail "the library: expected 8 warnings and a count"; }
grep -q "many.conf: 12 more bad lines, also ignored (r2sock-run --check lists them all)" <<<"$out" ||
  { echo "$out"; fail "the library: no count of the bad lines not shown"; }
echo "rules_check: bad lines are named with their numbers, the rest applies"

# No file, a file that is not there, one too large.
check --config "$tmp/missing.conf" --check --explain app 80
status 5 "a named file that is missing"
has "WARN  $tmp/missing.conf: cannot open it (No such file or directory)" "missing file"
R2SOCK_CONFIG='' check --check --explain app 80
status 0 "R2SOCK_CONFIG="
has "note  no rules file (R2SOCK_CONFIG is empty)" "R2SOCK_CONFIG="
head -c $((65 << 10)) /dev/zero | tr '\0' '#' >"$tmp/big.conf"
check --config "$tmp/big.conf" --check --explain app 80
status 5 "a file over 64 KiB"
has "larger than 64 KiB" "a file over 64 KiB"
echo "rules_check: missing, empty and oversized files"

# Usage errors exit 2 with a message.
for args in "--explain app 80" "--check --explain app" "--peer 1.2.3.4 --check" "--check --explain app 99999" \
  "--check --explain app 80 --peer nothing" "--check --explain app 80 --user no-such-user-here"; do
  # shellcheck disable=SC2086 # each case is several words
  check $args
  status 2 "r2sock-run $args"
  [ -s "$tmp/out" ] || fail "r2sock-run $args: expected a message"
done
echo "rules_check: usage errors exit 2"
echo PASS

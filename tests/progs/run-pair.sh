#!/usr/bin/env bash
# Runs one server and one client of tests/progs against each other and
# checks both exit codes.
#
#   run-pair.sh [--expect-server REGEX] -- SERVER CMD... -- CLIENT CMD...
#
# The server gets "--port 0 --ready-fd 3" appended: it binds a free port
# itself and writes the number to fd 3, a FIFO this script reads, once it is
# listening. So no port can be taken in between, and the client starts only
# when it can connect, with neither sleeps nor polling. The client gets
# "--port PORT" appended.
#
# R2SOCK_LIB, when set and non-empty, is preloaded into both ends with
# R2SOCK_STATS=1 and one R2SOCK_STATS_FILE per end; every stats file written
# must hold only "r2sock[PID] stats: key=value ..." lines whose conn_seen
# values add up to at least 1. Empty or unset: both ends run plain.
#
# Exit: 0 pass, 1 fail, 2 usage, 77 skipped (an end exited 77).
set -euo pipefail

usage() {
	echo "usage: $0 [--expect-server REGEX] -- SERVER CMD... -- CLIENT CMD..." >&2
	exit 2
}

expect_server=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	case $1 in
	--expect-server) [ $# -ge 2 ] || usage; expect_server=$2; shift 2 ;;
	*) usage ;;
	esac
done
[ $# -gt 0 ] || usage
shift
server=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do server+=("$1"); shift; done
[ $# -gt 0 ] && [ ${#server[@]} -gt 0 ] || usage
shift
client=("$@")
[ ${#client[@]} -gt 0 ] || usage

tmp=$(mktemp -d "${TMPDIR:-/tmp}/r2sock-progs.XXXXXX")
server_pid=
cleanup() {
	# The server runs in its own process group (setsid below), so this also
	# ends the children a forking server may have left behind.
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -KILL -- "-$server_pid" 2>/dev/null || kill -KILL "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

server_env=()
client_env=()
mode=plain
if [ -n "${R2SOCK_LIB:-}" ]; then
	[ -r "$R2SOCK_LIB" ] || { echo "FAIL: R2SOCK_LIB=$R2SOCK_LIB is not readable"; exit 1; }
	# A sanitizer build of the library needs its runtime first in the
	# initial library list, ahead of the library itself (tests/preload.sh).
	# shellcheck source=tests/preload.sh
	source "$(dirname "$0")/../preload.sh"
	r2s_preload "$R2SOCK_LIB"
	server_env=(env "LD_PRELOAD=$R2S_PRELOAD" R2SOCK_STATS=1 "R2SOCK_STATS_FILE=$tmp/server.stats")
	client_env=(env "LD_PRELOAD=$R2S_PRELOAD" R2SOCK_STATS=1 "R2SOCK_STATS_FILE=$tmp/client.stats")
	mode="preload $R2SOCK_LIB"
fi
setsid=()
if command -v setsid >/dev/null; then
	setsid=(setsid)
fi
echo "run-pair: $mode"
echo "run-pair: server: ${server[*]}"
echo "run-pair: client: ${client[*]}"

show() {
	local f
	for f in server.out client.out server.stats client.stats; do
		[ -e "$tmp/$f" ] || continue
		echo "---- $f"
		cat "$tmp/$f"
	done
}

mkfifo "$tmp/ready"
"${setsid[@]}" "${server_env[@]}" "${server[@]}" --port 0 --ready-fd 3 \
	3>"$tmp/ready" >"$tmp/server.out" 2>&1 &
server_pid=$!
# EOF (the server died) or the time limit (it hung) ends the read.
if ! read -r -t 30 port <"$tmp/ready" || [ -z "$port" ]; then
	server_rc=0
	kill -KILL -- "-$server_pid" 2>/dev/null || kill -KILL "$server_pid" 2>/dev/null || true
	wait "$server_pid" || server_rc=$?
	server_pid=
	show
	if [ "$server_rc" -eq 77 ]; then
		echo "SKIP: server skipped"
		exit 77
	fi
	echo "FAIL: server did not start listening (status $server_rc)"
	exit 1
fi

client_rc=0
"${client_env[@]}" "${client[@]}" --port "$port" >"$tmp/client.out" 2>&1 || client_rc=$?
# Both programs have their own watchdog (--timeout), so this wait is bounded.
server_rc=0
wait "$server_pid" || server_rc=$?
server_pid=
show

# Prints a summary of one stats file and fails unless every line has the
# expected form and the conn_seen values add up to at least 1.
check_stats() {
	local file=$1 who=$2
	if [ ! -e "$file" ]; then
		echo "run-pair: note: the $who wrote no stats file"
		return 0
	fi
	awk -v who="$who" '
		/^$/ { next }
		/^r2sock\[[0-9]+\] stats:( [^ =]+=[^ ]*)+$/ {
			lines++
			for (i = 3; i <= NF; i++) {
				eq = index($i, "=")
				if (substr($i, 1, eq - 1) == "conn_seen")
					seen += substr($i, eq + 1)
			}
			next
		}
		{ bad++; printf "run-pair: %s stats: malformed line: %s\n", who, $0 }
		END {
			printf "run-pair: %s stats: %d lines, conn_seen=%d\n", who, lines, seen
			exit (bad == 0 && lines > 0 && seen >= 1) ? 0 : 1
		}' "$file"
}

ok_or_skip() { [ "$1" -eq 0 ] || [ "$1" -eq 77 ]; }
fail=0
if [ "$client_rc" -eq 77 ] || [ "$server_rc" -eq 77 ]; then
	if ok_or_skip "$client_rc" && ok_or_skip "$server_rc"; then
		echo "SKIP: client status $client_rc, server status $server_rc"
		exit 77
	fi
	echo "FAIL: client status $client_rc, server status $server_rc"
	exit 1
fi
[ "$client_rc" -eq 0 ] || { echo "FAIL: client exited with status $client_rc"; fail=1; }
[ "$server_rc" -eq 0 ] || { echo "FAIL: server exited with status $server_rc"; fail=1; }
if [ -n "$expect_server" ] && ! grep -Eq -- "$expect_server" "$tmp/server.out"; then
	echo "FAIL: server output does not match /$expect_server/"
	fail=1
fi
if [ -n "${R2SOCK_LIB:-}" ]; then
	check_stats "$tmp/server.stats" server || { echo "FAIL: server stats"; fail=1; }
	check_stats "$tmp/client.stats" client || { echo "FAIL: client stats"; fail=1; }
fi
[ "$fail" -eq 0 ] || exit 1
echo "PASS"

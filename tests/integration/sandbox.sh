#!/usr/bin/env bash
# A server that confines its own system calls with seccomp halfway through
# a connection (src/sandbox.h), as OpenSSH's pre-authentication child does:
# tests/progs sandbox_echo echoes the first 1000 bytes, then installs a
# filter that kills it for any call but read/write and what exit needs
# (through prctl or through syscall(SYS_seccomp), as libseccomp does), and
# echoes the rest of 32 KiB. The shim must make no call of its own from
# then on, before the exit included: before it knew of filters, the server
# died of SIGSYS (its live-statistics segment, its reads of the socket).
# Asserted: the server exits 0 and the echo is byte-exact. Its connection
# settles on TCP there, so the suite's shm variant runs with the default
# policy: with R2SOCK_UPGRADE=now the client would switch at once, and a
# connection on a ring when the filter comes is not covered (README).
#   usage: sandbox.sh prctl|syscall
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/mixed-lib.sh
source "$(dirname "$0")/mixed-lib.sh"
r2s_python

via=${1:?usage: sandbox.sh prctl|syscall}
[[ $via == prctl || $via == syscall ]] || fail "unknown mode '$via'"
[[ $(uname -m) == x86_64 ]] || skip "sandbox_echo's filter is written for x86-64"
[[ ${R2SOCK_UPGRADE-} == now ]] && export R2SOCK_UPGRADE=auto
ECHO=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/sandbox_echo
[[ -x $ECHO ]] || fail "sandbox_echo not built under $ECHO (set R2SOCK_BUILD to the build dir)"
PEER=$(dirname "$0")/exec_handover_peer.py
N=$((32 << 10))

shm_snapshot
port=$(free_port)
start_server_at sandbox "$port" "$TMP/server-stats" "$ECHO" --port "$port" --via "$via" --before 1000
run_to_at "$TMP/client.out" 30 "$TMP/client-stats" "$PY" "$PEER" client --port "$port" --bytes "$N" --seed 9
wait_server sandbox 20
grep -q "exec_handover_peer client: echoed=$N" "$TMP/client.out" || fail "client: $(tail -n 3 "$TMP/client.out")"
grep -q "sandbox_echo: filter installed" "$TMP/sandbox.log" || fail "the server never installed its filter"
grep -q "sandbox_echo: OK" "$TMP/sandbox.log" || fail "server: $(tail -n 3 "$TMP/sandbox.log")"
log "echoed $N bytes, $((N - 1000)) of them under the server's seccomp filter ($via)"
shm_check_leaks
log PASS

#!/usr/bin/env bash
# A library at a path with a blank: the dynamic loader splits LD_PRELOAD at
# blanks and colons, so r2sock-run must preload it through a path without
# them (scripts/r2sock-preload.sh). The library is copied into a directory
# named "lib dir:1", both ends of a stream_check pair (96 MiB each way,
# every byte compared by the checker; both ends write before either has
# switched, so the first few MiB each way cross TCP: 32 MiB left 93.1% on
# shm with the CPUs busy) run through r2sock-run --lib with
# that path and their stats file in the same directory, and the stats must
# show both processes under the shim with the expected path
# (R2SOCK_EXPECT_PATH: tcp under R2SOCK_UPGRADE=never, else shm).
#   usage: space.sh
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
[[ -n $R2SOCK_LIB ]] || skip "a library at a path with a blank needs a library (R2SOCK_LIB is empty)"
RUN=${R2SOCK_SRC:-$(dirname "$0")/../..}/scripts/r2sock-run
SC=${R2SOCK_BUILD:-$(dirname "$0")/../../build}/tests/progs/stream_check
[[ -x $SC ]] || fail "stream_check not built: expected it at $SC (set R2SOCK_BUILD to the build dir)"

dir="$TMP/lib dir:1"
mkdir -p "$dir"
cp "$R2SOCK_LIB" "$dir/"
lib=$dir/${R2SOCK_LIB##*/}
STATS=$dir/stats
launch=("$RUN" --lib "$lib" --stats-file "$STATS")
# The launcher itself runs plain: only the programs it execs get the shim.
SHIM=(env -u LD_PRELOAD)

port=$(free_port)
start_server sc "$port" "${launch[@]}" -- "$SC" server --host 127.0.0.1 --port "$port" --once --timeout 60
run 60 "${launch[@]}" -- "$SC" client --host 127.0.0.1 --port "$port" --bytes 96M --bidir --timeout 60 \
  >"$TMP/client.log" 2>&1
wait_server sc 30
check_stats conns=2 bulk=2 bytes=$((192 << 20)) procs=2
log "a library under '$dir' preloaded by r2sock-run: 96 MiB each way compared, path ${R2SOCK_EXPECT_PATH:-any}"

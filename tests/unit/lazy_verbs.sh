#!/bin/bash
# libibverbs and librdmacm are loaded on a process's first RDMA offer and
# never otherwise (src/verbs.h, src/rdmacm.h): a process under the shim
# that makes no offer, be it one that never touches a socket or one whose
# connections stay on TCP or go to shared memory, must not map them, at
# exit included (the exit drain used
# to load it to look for queue pairs: every process under the shim paid for
# libibverbs and its libnl dependencies). Read from the dynamic loader's
# own trace (LD_DEBUG=files), which lists every object it opens.
set -euo pipefail
# shellcheck source=tests/unit/preload-env.sh
source "$(dirname "$0")/preload-env.sh"
lib=$1
r2s_preload_for "$lib"
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
py=$(python3 -c 'import sys; print(sys.executable)')
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT

check() {
  local what=$1
  shift
  # shellcheck disable=SC2154 # preload comes from r2s_preload_for
  LD_DEBUG=files LD_DEBUG_OUTPUT="$trace" LD_PRELOAD="$preload" "$@"
  # A positive control for the trace itself: the shim is in it, by the
  # path it was preloaded as (a link, where the library's has a blank).
  grep -q "file=${preload##*:} " "$trace".* || { echo "FAIL: the loader's trace does not show ${preload##*:} ($what)"; exit 1; }
  if grep -q -E "libibverbs|librdmacm" "$trace".*; then
    echo "FAIL: $what loaded rdma-core: $(grep -h -E "libibverbs|librdmacm" "$trace".* | head -n 2)"
    exit 1
  fi
  rm -f "$trace".*
  echo "ok: $what did not load libibverbs or librdmacm"
}

check "a process without sockets" /bin/true
# Both ends in one process, moving 1 MiB through shared memory.
R2SOCK_UPGRADE=now check "a process with a shared-memory connection" "$py" -c '
import socket, threading
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()
data = bytes(range(256)) * 4096
t = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR))); t.start()
got = bytearray()
while True:
    d = s.recv(1 << 16)
    if not d: break
    got += d
t.join(); assert bytes(got) == data, "bytes differ"
'

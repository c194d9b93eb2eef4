#!/usr/bin/env python3
"""MSG_ZEROCOPY sends through the shim (tests/integration/zerocopy.sh):

  zerocopy_peer.py --when before|after [--bytes B]

One process, a client and a server on 127.0.0.1. Each end sets
SO_ZEROCOPY (the client before connect() or right after it, per --when;
the server right after accept()), sends B random bytes with MSG_ZEROCOPY
from one buffer it keeps, and then waits for the kernel's
acknowledgements on the socket's error queue (POLLERR, then recvmsg with
MSG_ERRQUEUE) until they cover every send it made, as a program must
before it may reuse its buffer. Each end then reads the other's bytes and
compares them. Prints
    zerocopy_peer: OK when=WHEN sends=N acked=N
or says what was missing, and exits 1.
"""
import argparse
import os
import select
import socket
import struct
import sys
import threading

SO_ZEROCOPY = 60
MSG_ZEROCOPY = 0x4000000
MSG_ERRQUEUE = 0x2000
SO_EE_ORIGIN_ZEROCOPY = 5
CHUNK = 64 << 10


def send_all_zerocopy(s, data):
    """Sends data with MSG_ZEROCOPY; returns the number of send calls."""
    mv = memoryview(data)
    sent = calls = 0
    while sent < len(data):
        sent += s.send(mv[sent:sent + CHUNK], MSG_ZEROCOPY)
        calls += 1
    return calls


def wait_acks(s, calls, who):
    """Reads the error queue until the acknowledgements cover send calls
    0..calls-1 (each says a range [lo, hi] of them)."""
    acked = -1
    p = select.poll()
    p.register(s, select.POLLERR)
    while acked < calls - 1:
        if not p.poll(10000):
            sys.exit(f"zerocopy_peer: {who}: no acknowledgement for 10 s; {acked + 1} of {calls} sends acknowledged")
        try:
            _, anc, _, _ = s.recvmsg(0, 1024, MSG_ERRQUEUE)
        except BlockingIOError:
            continue
        for _level, _type, raw in anc:
            ee_errno, origin, _t, _code, _pad, lo, hi = struct.unpack("=IBBBBII", raw[:16])
            if origin != SO_EE_ORIGIN_ZEROCOPY or ee_errno != 0:
                sys.exit(f"zerocopy_peer: {who}: unexpected error queue entry (origin {origin}, errno {ee_errno})")
            acked = max(acked, hi)
    return acked + 1


def read_exactly(s, n):
    got = bytearray()
    while len(got) < n:
        d = s.recv(min(1 << 20, n - len(got)))
        if not d:
            break
        got += d
    return bytes(got)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--when", choices=["before", "after"], required=True)
    p.add_argument("--bytes", type=int, default=2 << 20)
    a = p.parse_args()
    up, down = os.urandom(a.bytes), os.urandom(a.bytes)
    ls = socket.create_server(("127.0.0.1", 0))
    port = ls.getsockname()[1]
    result = {}

    def reader(sock, want, key):
        result[key] = read_exactly(sock, a.bytes) == want

    def serve():
        c, _ = ls.accept()
        c.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
        # The acknowledgement of a send comes once its bytes were taken: on
        # loopback, once the other end read them.
        r = threading.Thread(target=reader, args=(c, up, "server_read_ok"))
        r.start()
        calls = send_all_zerocopy(c, down)
        result["server_acked"] = wait_acks(c, calls, "server")
        r.join(30)
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    s = socket.socket()
    if a.when == "before":
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    s.connect(("127.0.0.1", port))
    if a.when == "after":
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    r = threading.Thread(target=reader, args=(s, down, "client_read_ok"))
    r.start()
    calls = send_all_zerocopy(s, up)
    acked = wait_acks(s, calls, "client")
    r.join(30)
    if not result.get("client_read_ok"):
        sys.exit("zerocopy_peer: the client read other bytes than the server sent")
    t.join(30)
    if t.is_alive() or not result.get("server_read_ok"):
        sys.exit(f"zerocopy_peer: the server did not read the client's bytes intact ({result})")
    s.close()
    print(f"zerocopy_peer: OK when={a.when} sends={calls} acked={acked}", flush=True)


if __name__ == "__main__":
    main()

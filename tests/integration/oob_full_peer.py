#!/usr/bin/env python3
"""A nonblocking send(MSG_OOB) while the sender's socket is full
(tests/integration/oob-full.sh). Both ends shrink their socket buffers.

server --port P --mode write|oob --record FILE --stuck FLAG
    Accepts one connection and, from before the client's request (so that
    its shim sends DATA frames and learns of the client's ring while the
    socket is full), writes chunks of a seeded stream without blocking until
    its writes have made no progress for STUCK seconds. Then it tries the
    urgent byte '!' with send(MSG_OOB) without blocking; while it is
    refused, in mode `write` it first writes on without blocking (waiting
    for the socket to be writable between tries) until AFTER_WRITES writes
    have taken bytes, then (both modes) retries the urgent byte until one is
    taken, waiting for the socket between tries. Then it writes MORE bytes
    of the stream (blocking), half-closes, and reads the client's request
    and end of stream. FILE gets exactly the bytes its successful writes
    took, in order, the urgent byte in its place. Prints:
      oob_full_peer server: wrote=N oob_eagain=K after_writes=A/W
    (K: urgent tries refused with EAGAIN; W: plain writes tried behind the
    refused urgent byte, A: those of them that took bytes). It creates
    FLAG once the case is reached with the client reading nothing: the
    urgent byte refused and, in mode `write`, a write behind it refused, in
    mode `oob`, OOB_REFUSED tries of it refused.
client --port P --save FILE --stuck FLAG
    Connects, sends its request after a pause, and reads nothing until
    FLAG exists (the server is stuck by then); then peeks at the first
    byte, sets SO_OOBINLINE (so that the urgent byte stays in the stream at
    its place), reads to the end of the stream into FILE and half-closes. Prints:
      oob_full_peer client: received=N
"""
import argparse
import os
import select
import socket
import sys
import time

from peer_streams import accept_one, recv_all, stream

TOTAL = 16 << 20
BUF = 8192
CHUNK = 100
STUCK = 2.0
MORE = 64 << 10
AFTER_WRITES = 8
# `oob`: refused tries before the client reads, each of which queued a PLAIN
# frame before the fix: more than 32 of 16 bytes filled the shim's control
# queue (512 bytes).
OOB_REFUSED = 48
DEADLINE = 30.0
URGENT = b"!"


def stuck_now(flag):
    """Tells the client that it may read now (once)."""
    if not os.path.exists(flag):
        open(flag, "w").close()


def server(a, data):
    s = accept_one(a.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUF)
    time.sleep(0.2)  # the client's hello is in: the first write switches
    s.setblocking(False)
    record, pos = bytearray(), 0

    def write():
        """One nonblocking write of the stream's next chunk; bytes taken."""
        nonlocal pos
        try:
            n = s.send(data[pos : pos + CHUNK])
        except BlockingIOError:
            return 0
        record.extend(data[pos : pos + n])
        pos += n
        return n

    stuck_since = None
    while pos < TOTAL:
        if write():
            stuck_since = None
            continue
        stuck_since = stuck_since or time.monotonic()
        if time.monotonic() - stuck_since > STUCK:
            break
        time.sleep(0.005)
    end = time.monotonic() + DEADLINE

    def urgent():
        """One nonblocking try of the urgent byte; whether it was taken."""
        try:
            if s.send(URGENT, socket.MSG_OOB) != 1:
                sys.exit("oob_full_peer server: send(MSG_OOB) took no byte")
        except BlockingIOError:
            if time.monotonic() > end:
                sys.exit(f"oob_full_peer server: the urgent byte still refused after {DEADLINE:.0f} s")
            return False
        record.extend(URGENT)
        return True

    eagain = tries = took = 0
    if not urgent():
        eagain += 1
        # `write`: plain writes behind the refused urgent byte, until
        # AFTER_WRITES of them took bytes (the socket drains once the
        # client reads, which it does once one of them was refused).
        while a.mode == "write" and took < AFTER_WRITES:
            if time.monotonic() > end:
                sys.exit(f"oob_full_peer server: {took} writes took bytes in {DEADLINE:.0f} s")
            select.select([], [s], [], 0.05)
            tries += 1
            took += write() > 0
            if tries > took:
                stuck_now(a.stuck)
        while not urgent():
            eagain += 1
            if a.mode == "write" or eagain >= OOB_REFUSED:
                stuck_now(a.stuck)
            select.select([], [s], [], 0.05)
    stuck_now(a.stuck)
    s.setblocking(True)
    s.settimeout(DEADLINE)
    s.sendall(data[pos : pos + MORE])
    record.extend(data[pos : pos + MORE])
    s.shutdown(socket.SHUT_WR)
    with open(a.record, "wb") as f:
        f.write(record)
    print(
        f"oob_full_peer server: wrote={len(record)} oob_eagain={eagain} after_writes={took}/{tries}",
        flush=True,
    )
    if s.recv(16) != b"GET" or s.recv(1) != b"":
        sys.exit("oob_full_peer server: expected the request, then the end of the stream")
    s.close()


def client(a):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
    s.connect(("127.0.0.1", a.port))
    began = time.monotonic()
    time.sleep(1.0)  # the server's socket is full of frames by now
    s.sendall(b"GET")
    end = began + DEADLINE
    while not os.path.exists(a.stuck):
        if time.monotonic() > end:
            sys.exit(f"oob_full_peer client: the server was not stuck within {DEADLINE:.0f} s")
        time.sleep(0.01)
    # A peek first: it makes our shim read the server's switch mark (if its
    # request did not), which SO_OOBINLINE would put into the stream.
    s.settimeout(DEADLINE)
    if len(s.recv(1, socket.MSG_PEEK)) != 1:
        sys.exit("oob_full_peer client: the end of the stream before any byte")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
    got = recv_all(s)
    with open(a.save, "wb") as f:
        f.write(got)
    print(f"oob_full_peer client: received={len(got)}", flush=True)
    s.shutdown(socket.SHUT_WR)
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["write", "oob"], default="write")
    ap.add_argument("--record")
    ap.add_argument("--save")
    ap.add_argument("--stuck", required=True)
    a = ap.parse_args()
    if a.role == "server":
        server(a, stream(17, TOTAL))
    else:
        client(a)


if __name__ == "__main__":
    main()

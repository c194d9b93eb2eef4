#!/usr/bin/env python3
"""A server that greets first and a client that reads the greeting only after
sending a lot (for read-ahead.sh).

server --port P --seed S --greeting G --bytes N
    Accepts one connection, sends G pseudo-random bytes (seed S) at once,
    then reads exactly N bytes (seed S+1) and checks them, then sends "bye"
    and closes. Prints:
      greeting_peer server: received=N
client --port P --seed S --greeting G --bytes N [--peek-first]
    Connects and sends N bytes without reading anything (with --peek-first:
    it first peeks the whole greeting, and after sending reads as many
    bytes as it peeked in one read, which must return them all). Only then does it
    look at the greeting through each way an application can: select()
    must call the socket readable, FIONREAD must count at least one byte,
    a MSG_PEEK must return the greeting's first bytes and leave them, a
    MSG_DONTWAIT read must take some of them; the rest is read with
    MSG_WAITALL and the greeting checked byte for byte; then "bye" and the
    end of the stream. Prints:
      greeting_peer client: sent=N greeting=G
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import fcntl
import select
import socket
import struct
import sys
import termios
import time

from peer_streams import accept_one, expect_same, recv_exactly, stream

DEADLINE = 60.0
CHUNK = 64 << 10


def server(args):
    s = accept_one(args.port)
    s.settimeout(DEADLINE)
    s.sendall(stream(args.seed, args.greeting))
    data = recv_exactly(s, args.bytes, "greeting_peer server")
    expect_same("the client's stream", data, stream(args.seed + 1, args.bytes))
    s.sendall(b"bye")
    s.close()
    print(f"greeting_peer server: received={len(data)}", flush=True)
    return 0


def peek_all(s, n):
    """MSG_PEEK until n bytes are there (bounded), without taking any."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            got = s.recv(n, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = b""
        if len(got) >= n or time.monotonic() > end:
            return got
        time.sleep(0.01)


def client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    out = stream(args.seed + 1, args.bytes)
    want = stream(args.seed, args.greeting)
    first = b""
    if args.peek_first:
        # Peek the whole greeting, then send (the shim's sender reads part
        # of it ahead meanwhile), then read as much as was peeked: one read
        # must return all of it, as TCP does for bytes already queued.
        peeked = peek_all(s, args.greeting)
        expect_same("the peeked greeting", peeked, want)
    for off in range(0, len(out), CHUNK):
        s.sendall(out[off:off + CHUNK])
    if args.peek_first:
        first = s.recv(len(peeked))
        if len(first) != len(peeked):
            raise AssertionError(f"a read after a MSG_PEEK of {len(peeked)} bytes returned {len(first)}")
        expect_same("the greeting read after the peek", first, want[:len(first)])
        want = want[len(first):]
    got = bytearray()
    if want:  # with --peek-first the peeked read may have taken it all
        r, _, _ = select.select([s], [], [], DEADLINE)
        if not r:
            raise AssertionError(f"select() did not call the socket readable within {DEADLINE} s")
        queued = struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        if queued < 1:
            raise AssertionError(f"FIONREAD says {queued} bytes although select() says readable")
        peek = s.recv(64, socket.MSG_PEEK)
        if not peek or peek != want[:len(peek)]:
            raise AssertionError(f"MSG_PEEK returned {peek[:16].hex()}..., expected the greeting's first bytes")
        got = bytearray(s.recv(100, socket.MSG_DONTWAIT))
        if not got:
            raise AssertionError("a MSG_DONTWAIT read returned nothing although select() says readable")
        # MSG_WAITALL waits for all only on a blocking socket (Python's timeout
        # makes it nonblocking); the run's own bound (read-ahead.sh) covers a hang.
        s.settimeout(None)
        got += s.recv(len(want) - len(got), socket.MSG_WAITALL)
        s.settimeout(DEADLINE)
        expect_same("the greeting", bytes(got), want)
    got = first + bytes(got)
    tail = recv_exactly(s, 3, "greeting_peer client")
    if tail != b"bye" or s.recv(1):
        raise AssertionError(f"expected 'bye' and the end of the stream after the greeting, got {tail!r}")
    s.close()
    print(f"greeting_peer client: sent={len(out)} greeting={len(got)}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--greeting", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--peek-first", action="store_true",
                   help="client: peek the whole greeting before sending, then read it in one read")
    args = p.parse_args()
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, AssertionError) as e:
        print(f"greeting_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

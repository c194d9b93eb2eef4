#!/usr/bin/env python3
"""Reads at the edges of a stream: SO_RCVTIMEO on an idle connection, and
reads after shutdown(SHUT_RD) with bytes still queued (for read-edges.sh).

server --port P --seed S --bytes N --tail T
    Accepts one connection, sends N pseudo-random bytes (seed S), waits for
    the client's one-byte go-ahead, sends T more (seed S+1), then reads until
    the end of the stream, which must come with no byte. Prints:
      read_edges_peer server: OK
client --port P --seed S --bytes N --tail T
    Connects and reads the N bytes and checks them. With the connection
    idle, a blocking read under SO_RCVTIMEO of 200 ms must fail with EAGAIN,
    and not before the 200 ms have passed. Then it sends the go-ahead and
    peeks until the T tail bytes are all queued. Then shutdown(SHUT_RD): as
    Linux's TCP does, reads must still hand out the queued tail (checked
    byte for byte), then the end of the stream, at once and again on every
    later read (blocking, MSG_DONTWAIT, and a blocking read with no timeout
    left to the socket: a read that waited would never end, and the test's
    bound fails it). Prints:
      read_edges_peer client: OK received=N+T
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import socket
import struct
import sys
import time

from peer_streams import accept_one, expect_same, recv_exactly, stream

DEADLINE = 30.0
RCVTIMEO_US = 200000


def server(args):
    s = accept_one(args.port)
    s.settimeout(DEADLINE)
    s.sendall(stream(args.seed, args.bytes))
    if recv_exactly(s, 1, "read_edges_peer server") != b"k":
        raise AssertionError("the client's go-ahead is not 'k'")
    s.sendall(stream(args.seed + 1, args.tail))
    rest = s.recv(1 << 16)
    if rest:
        raise AssertionError(f"expected the end of the stream, got {len(rest)} bytes")
    s.close()
    print("read_edges_peer server: OK", flush=True)
    return 0


def queued_tail(s, n):
    """MSG_PEEK until n bytes are queued (bounded), taking none."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            got = s.recv(n, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = b""
        if len(got) >= n:
            return
        if time.monotonic() > end:
            raise AssertionError(f"only {len(got)} of the {n} tail bytes arrived")
        time.sleep(0.001)


def client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    got = recv_exactly(s, args.bytes, "read_edges_peer client")
    expect_same("the server's stream", got, stream(args.seed, args.bytes))
    s.settimeout(None)  # a blocking socket: the kernel's (or the shim's) SO_RCVTIMEO alone bounds the read
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, RCVTIMEO_US))
    began = time.monotonic()
    try:
        got = s.recv(4096)
        raise AssertionError(f"a read of the idle connection under SO_RCVTIMEO returned {len(got)} bytes")
    except BlockingIOError:
        pass
    waited = time.monotonic() - began
    if waited < RCVTIMEO_US / 1e6:
        raise AssertionError(f"SO_RCVTIMEO of {RCVTIMEO_US} us ended the read after {waited * 1e6:.0f} us")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
    s.settimeout(DEADLINE)
    s.sendall(b"k")
    queued_tail(s, args.tail)
    s.shutdown(socket.SHUT_RD)
    got = recv_exactly(s, args.tail, "read_edges_peer client")
    expect_same("the tail read after SHUT_RD", got, stream(args.seed + 1, args.tail))
    for how in ("blocking", "MSG_DONTWAIT", "blocking again"):
        got = s.recv(4096, socket.MSG_DONTWAIT) if how == "MSG_DONTWAIT" else s.recv(4096)
        if got:
            raise AssertionError(f"read ({how}) after the tail: expected the end of the stream,"
                                 f" got {len(got)} bytes")
    s.settimeout(None)  # a read that waited now waits for good: the script's bound ends it
    if s.recv(4096):
        raise AssertionError("a read with no timeout after the tail returned bytes")
    s.close()
    print(f"read_edges_peer client: OK received={args.bytes + args.tail}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--tail", type=int, required=True)
    args = p.parse_args()
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, AssertionError) as e:
        print(f"read_edges_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

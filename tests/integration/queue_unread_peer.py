#!/usr/bin/env python3
"""Bytes a writer may queue before its reader reads, as kernel TCP takes
them (for queue-unread.sh). One process holds both ends of each
connection, as a program whose one thread drives both does: it can only
read once its write has returned, so a write that blocks where TCP's would
not never returns.

run --queue Q [--host ADDR]
    Three connections, each warmed up with a round trip first:
      one-way    a blocking sendall of Q bytes, then the peer reads them;
      both-ways  each end a blocking sendall of Q/2 bytes, then each reads;
      nonblock   a nonblocking writer sends until EAGAIN (three looks a
                 fifth of a second apart, as room may come a little late):
                 it must have got at least Q bytes in; then the reader
                 reads all it took;
      small      Q/4 bytes in blocking writes of 64 bytes each (over RDMA
                 each is a message of its own, using one of the reader's
                 posted receives), then the writer shuts down: the reader
                 then reads every byte and the end of the stream behind
                 them.
    Every byte is compared. A write that blocks for DEADLINE seconds
    fails the run (it would have hung). Prints
      queue_unread_peer: OK queued=Q nonblock_took=N
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import select
import socket
import sys

from peer_streams import expect_same, recv_exactly, stream

DEADLINE = 20.0
HOST = "127.0.0.1"


def pair():
    """A connected pair over HOST, warmed up by a round trip each way
    (an upgrade that comes at the first bytes has come by then)."""
    ls = socket.socket()
    ls.bind((HOST, 0))
    ls.listen(1)
    c = socket.create_connection(ls.getsockname(), timeout=DEADLINE)
    s, _ = ls.accept()
    ls.close()
    s.settimeout(DEADLINE)
    for _ in range(2):
        c.sendall(b"w")
        recv_exactly(s, 1, "queue_unread_peer warm-up")
        s.sendall(b"u")
        recv_exactly(c, 1, "queue_unread_peer warm-up")
    return s, c


def send_unread(k, data, what):
    try:
        k.sendall(data)
    except socket.timeout:
        raise AssertionError(f"{what}: a blocking write of {len(data)} bytes, its reader not reading, did not"
                             f" return within {DEADLINE} s (kernel TCP takes them)") from None


def one_way(q):
    s, c = pair()
    data = stream(1, q)
    send_unread(c, data, "one-way")
    expect_same("one-way: the bytes read", recv_exactly(s, q, "queue_unread_peer one-way"), data)
    s.close(), c.close()


def both_ways(q):
    s, c = pair()
    up, down = stream(2, q // 2), stream(3, q // 2)
    send_unread(c, up, "both-ways, client")
    send_unread(s, down, "both-ways, server")
    expect_same("both-ways: the bytes the server read", recv_exactly(s, len(up), "queue_unread_peer"), up)
    expect_same("both-ways: the bytes the client read", recv_exactly(c, len(down), "queue_unread_peer"), down)
    s.close(), c.close()


def nonblock(q):
    s, c = pair()
    c.setblocking(False)
    data = stream(4, 2 * q + (1 << 20))
    sent, still = 0, 0
    while still < 3 and sent < len(data):
        try:
            sent += c.send(data[sent:sent + 65536])
            still = 0
        except BlockingIOError:
            still += 1
            select.select([], [c], [], 0.2)
    if sent < q:
        raise AssertionError(f"nonblock: the writer got EAGAIN after {sent} bytes; kernel TCP takes at least {q}")
    expect_same("nonblock: the bytes read", recv_exactly(s, sent, "queue_unread_peer nonblock"), data[:sent])
    s.close(), c.close()
    return sent


def small(q):
    s, c = pair()
    data = stream(5, q)
    for i in range(0, q, 64):
        send_unread(c, data[i:i + 64], "small")
    c.shutdown(socket.SHUT_WR)
    expect_same("small: the bytes read", recv_exactly(s, q, "queue_unread_peer small"), data)
    if s.recv(1) != b"":
        raise AssertionError("small: the reader found bytes past the writer's, not the end of the stream")
    s.close(), c.close()


def main():
    global HOST
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["run"])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--host", default=HOST)
    a = ap.parse_args()
    HOST = a.host
    try:
        one_way(a.queue)
        both_ways(a.queue)
        took = nonblock(a.queue)
        small(a.queue // 4)
    except AssertionError as e:
        print(f"queue_unread_peer: FAIL: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"queue_unread_peer: OK queued={a.queue} nonblock_took={took}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

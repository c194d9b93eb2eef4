"""Byte streams both ends of a test peer can make from a seed, where a
received one first differs, the one connection a server peer takes, a read
of an exact length and a read to the end of the stream (imported by the
*_peer.py scripts beside it)."""
import random
import socket
import sys


def stream(seed, n):
    return random.Random(seed).randbytes(n)


def first_difference(got, want):
    n = min(len(got), len(want))
    for i in range(n):
        if got[i] != want[i]:
            return i
    return n


def accept_one(port):
    """The first connection to 127.0.0.1:port."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    s, _ = ls.accept()
    ls.close()
    return s


def recv_exactly(s, n, who):
    """n bytes; a stream that ends first ends the peer, who saying which."""
    data = b""
    while len(data) < n:
        more = s.recv(n - len(data))
        if not more:
            sys.exit(f"{who}: end of stream after {len(data)} of {n} bytes")
        data += more
    return data


def recv_all(s):
    """Everything up to the end of the stream (a reset raises)."""
    got = bytearray()
    while True:
        d = s.recv(1 << 20)
        if not d:
            return bytes(got)
        got += d

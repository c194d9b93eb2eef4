"""Byte streams both ends of a test peer can make from a seed, where a
received one first differs (and a check that names it), the one connection
a server peer takes, a read of an exact length and a read to the end of the
stream (imported by the
*_peer.py scripts beside it)."""
import random
import socket
import sys
import threading


BLOCK = 1 << 20


def stream(seed, n):
    """n pseudo-random bytes from seed, the first n of any longer stream of
    the same seed. Block after block of BLOCK bytes, each a rotation, by a
    random offset, of one random block: drawing every byte from the
    generator costs about 20 ns a byte, seconds for each end of a stream of
    a hundred MiB, where a rotation is a copy. A byte that arrives displaced
    still differs from the one expected: within a block because the block is
    random, across blocks unless the displacement equals the difference of
    their offsets (1 in BLOCK)."""
    rng = random.Random(seed)
    base = rng.randbytes(BLOCK)
    if n <= BLOCK:
        return base[:max(n, 0)]
    twice = memoryview(base + base)  # views: the join below is the one copy
    parts = [twice[:BLOCK]]
    for at in range(BLOCK, n, BLOCK):
        r = rng.randrange(BLOCK)
        parts.append(twice[r:r + min(BLOCK, n - at)])
    return b"".join(parts)


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


def expect_same(what, got, want):
    """An AssertionError naming where got first differs from want."""
    if got != want:
        i = first_difference(got, want)
        raise AssertionError(f"{what} differs at offset {i} (got {len(got)} of {len(want)} bytes):"
                             f" got {bytes(got[i:i + 16]).hex()} want {want[i:i + 16].hex()}")


def recv_exactly(s, n, who):
    """n bytes; a stream that ends first ends the peer, who saying which.
    Gathered in a bytearray, at most 1 MiB a read: streams of tens of MiB
    arrive in socket-buffer pieces, and appending to bytes copied all of
    it again for each."""
    data = bytearray()
    while len(data) < n:
        more = s.recv(min(n - len(data), 1 << 20))
        if not more:
            sys.exit(f"{who}: end of stream after {len(data)} of {n} bytes")
        data += more
    return bytes(data)


def recv_all(s):
    """Everything up to the end of the stream (a reset raises)."""
    got = bytearray()
    while True:
        d = s.recv(1 << 20)
        if not d:
            return bytes(got)
        got += d


def send_in_background(s, data):
    """Sends data, then shuts the sending side down, on a thread of its own
    (so that the caller can read an echo meanwhile). Returns a function that
    waits for it (at most timeout seconds) and raises what went wrong."""
    failed = []

    def run():
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            failed.append(e)

    t = threading.Thread(target=run)
    t.start()

    def join(timeout):
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"sending {len(data)} bytes took over {timeout} s")
        if failed:
            raise AssertionError(f"sending failed: {failed[0]}")

    return join

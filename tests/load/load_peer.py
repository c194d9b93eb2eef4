#!/usr/bin/env python3
"""Many connections held open for a while, each moving checked bytes both
ways (scripts/load, scripts/soak).

server --port P --conns N [--seed S]
    Accepts N connections; on each, sends its stream until the client's end
    of stream, then half-closes.
client --port P --conns N --seconds T [--interval I] [--seed S]
    Opens N connections, and once all are up, sends on each for T seconds,
    then half-closes each and reads until the server's end.
Both ends check every byte they receive against the generator as it comes
and keep a CRC-32 of each connection's stream per direction. Each direction
of a connection is a stream from one random block (seed S), read from an
offset of its own (from the client's port), so no two connections carry the
same bytes at the same place. Lines on stdout (the driver parses them):
    load_peer client: established conns=N in=SECONDS
    load_peer client: t=SECONDS sent=B recv=B verified=B errors=E   (every I s)
    load_peer ROLE: done conns=N sent=B recv=B verified=B crc_sent=X crc_recv=X errors=E
crc_sent/crc_recv: the sum over connections of each stream's CRC-32, so
that the client's crc_sent must equal the server's crc_recv and back.
Exit status: 0 with no error, 1 otherwise (the errors on stderr).
"""
import argparse
import errno
import random
import select
import selectors
import socket
import sys
import time
import zlib

BLOCK = 1 << 20  # the generator's period
CHUNK = 64 << 10  # at most this much per send or receive
DEADLINE = 60.0  # to connect all, and to drain at the end


class Stream:
    """One direction of one connection: where it is, and its CRC."""

    def __init__(self, offset):
        self.offset = offset
        self.n = 0
        self.crc = 0

    def expected(self, block, k):
        at = (self.offset + self.n) % BLOCK
        return block[at:at + k]


class Conn:
    """Its streams' offsets come from the client's port, which both ends know."""

    def __init__(self, sock, index, role_out):
        self.sock = sock
        self.index = index
        port = sock.getsockname()[1] if role_out == 0 else sock.getpeername()[1]
        self.tx = Stream(random.Random(port * 2 + role_out).randrange(BLOCK))
        self.rx = Stream(random.Random(port * 2 + 1 - role_out).randrange(BLOCK))
        self.sending = True
        self.eof = False
        self.registered = True


class Peer:
    def __init__(self, role, seed):
        rng = random.Random(seed)
        raw = rng.randbytes(BLOCK)
        self.block = memoryview(raw + raw[:CHUNK])  # any CHUNK from any offset is contiguous
        self.role_out = 0 if role == "client" else 1
        self.role = role
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.errors = 0
        self.buf = bytearray(CHUNK)
        self.sent = self.recv = self.verified = 0

    def error(self, c, what):
        self.errors += 1
        if self.errors <= 10:
            print(f"load_peer {self.role}: conn {c.index}: {what}", file=sys.stderr, flush=True)

    def add(self, sock):
        sock.setblocking(False)
        c = Conn(sock, len(self.conns), self.role_out)
        self.conns.append(c)
        self.sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        return c

    def events(self, c):
        return (selectors.EVENT_READ if not c.eof else 0) | (selectors.EVENT_WRITE if c.sending else 0)

    def update(self, c):
        ev = self.events(c)
        if ev:
            self.sel.modify(c.sock, ev, c)
        elif c.registered:
            self.sel.unregister(c.sock)
            c.registered = False

    def stop_sending(self, c):
        if not c.sending:
            return
        c.sending = False
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.error(c, f"shutdown: {e}")
        self.update(c)

    def do_send(self, c):
        data = c.tx.expected(self.block, CHUNK)
        try:
            k = c.sock.send(data)
        except BlockingIOError:
            return
        except OSError as e:
            self.error(c, f"send: {e}")
            c.sending = False
            self.update(c)
            return
        c.tx.crc = zlib.crc32(data[:k], c.tx.crc)
        c.tx.n += k
        self.sent += k

    def do_recv(self, c):
        try:
            k = c.sock.recv_into(self.buf, CHUNK)
        except BlockingIOError:
            return
        except OSError as e:
            self.error(c, f"recv: {e}")
            k = 0
        if k == 0:
            c.eof = True
            if self.role == "server" and c.sending:
                self.stop_sending(c)  # which updates the registration
            else:
                self.update(c)
            return
        got = memoryview(self.buf)[:k]
        if got != c.rx.expected(self.block, k):
            self.error(c, f"{k} bytes at offset {c.rx.n} differ from the generator's")
        else:
            self.verified += k
        c.rx.crc = zlib.crc32(got, c.rx.crc)
        c.rx.n += k
        self.recv += k

    def step(self, timeout):
        for key, mask in self.sel.select(timeout):
            c = key.data
            if mask & selectors.EVENT_READ and not c.eof:
                self.do_recv(c)
            if mask & selectors.EVENT_WRITE and c.sending:
                self.do_send(c)

    def done(self):
        crc_sent = sum(c.tx.crc for c in self.conns)
        crc_recv = sum(c.rx.crc for c in self.conns)
        print(f"load_peer {self.role}: done conns={len(self.conns)} sent={self.sent} recv={self.recv}"
              f" verified={self.verified} crc_sent={crc_sent} crc_recv={crc_recv} errors={self.errors}", flush=True)
        for c in self.conns:
            c.sock.close()
        return 0 if self.errors == 0 else 1


def server(args):
    p = Peer("server", args.seed)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(1024)
    ls.setblocking(False)
    p.sel.register(ls, selectors.EVENT_READ, None)
    accepting = True
    while accepting or any(not c.eof for c in p.conns):
        for key, mask in p.sel.select(1.0):
            if key.data is None:
                try:
                    s, _ = ls.accept()
                except BlockingIOError:
                    continue
                p.add(s)
                if len(p.conns) == args.conns:
                    p.sel.unregister(ls)
                    ls.close()
                    accepting = False
                continue
            c = key.data
            if mask & selectors.EVENT_READ and not c.eof:
                p.do_recv(c)
            if mask & selectors.EVENT_WRITE and c.sending:
                p.do_send(c)
    return p.done()


def client(args):
    p = Peer("client", args.seed)
    t0 = time.monotonic()
    pending = []
    for _ in range(args.conns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", args.port))
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, f"connect: {errno.errorcode.get(err, err)}")
        pending.append(s)
    # Every connection up before any byte moves.
    for s in pending:
        poller = select.poll()
        poller.register(s, select.POLLOUT)
        left = t0 + DEADLINE - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000) or s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            raise OSError(f"connect failed or timed out after {len(p.conns)} of {args.conns} connections")
        p.add(s)
    start = time.monotonic()
    print(f"load_peer client: established conns={args.conns} in={start - t0:.2f}", flush=True)
    next_report = start + args.interval
    end = start + args.seconds
    while time.monotonic() < end:
        p.step(0.5)
        now = time.monotonic()
        if now >= next_report:
            print(f"load_peer client: t={now - start:.0f} sent={p.sent} recv={p.recv} verified={p.verified}"
                  f" errors={p.errors}", flush=True)
            next_report += args.interval
    for c in p.conns:
        p.stop_sending(c)
    drain_end = time.monotonic() + DEADLINE
    while any(not c.eof for c in p.conns):
        if time.monotonic() > drain_end:
            left = sum(1 for c in p.conns if not c.eof)
            raise TimeoutError(f"{left} connections without the server's end of stream after {DEADLINE:.0f} s")
        p.step(0.5)
    return p.done()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, TimeoutError) as e:
        print(f"load_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

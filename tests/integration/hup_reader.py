#!/usr/bin/env python3
"""A reader that trusts a short read, as libuv does (tests/integration/hup-reader.sh):

  hup_reader.py [--conns N] [--bytes B] [--rounds R]

An echo server (a thread per connection: blocking reads of 64 KiB, each
sent back whole, then shutdown(SHUT_WR) at the end of the stream) and N
clients in one epoll loop, the way libuv reads a stream (uv__stream_io,
uv__read): on EPOLLIN, EPOLLERR or EPOLLHUP it reads 64 KiB at a time,
at most 32 times, and stops at the first read that returns less than it
asked for; if that event also said EPOLLHUP, it takes the short read as the
end of the stream without reading again. On plain TCP that is right: a
short read emptied the socket, and with both directions shut no byte can
come after. Each client writes B random bytes while it reads, then shuts
down its direction, and must read exactly its bytes back. R rounds.

Prints "hup_reader: OK conns=N bytes=B rounds=R" or says which connection
read what, and exits 1.
"""
import argparse
import os
import select
import socket
import sys
import threading

CHUNK = 64 << 10


def fail(msg):
    print("hup_reader: FAIL " + msg, flush=True)
    sys.exit(1)


def echo(s):
    with s:
        while True:
            d = s.recv(CHUNK)
            if not d:
                break
            s.sendall(d)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # until the client closes


def serve(ls, n):
    threads = []
    for _ in range(n):
        s, _ = ls.accept()
        s.settimeout(60)
        t = threading.Thread(target=echo, args=(s,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


class Client:
    def __init__(self, addr, nbytes):
        self.data = os.urandom(nbytes)
        self.sent = 0
        self.got = bytearray()
        self.ended = False
        self.shut = False
        self.s = socket.socket()
        self.s.connect(addr)
        self.s.setblocking(False)

    def write(self):
        while self.sent < len(self.data):
            try:
                self.sent += self.s.send(self.data[self.sent:self.sent + (1 << 20)])
            except BlockingIOError:
                return
        if not self.shut:
            self.s.shutdown(socket.SHUT_WR)
            self.shut = True

    def read(self, events):
        partial = False
        for _ in range(32):
            try:
                d = self.s.recv(CHUNK)
            except BlockingIOError:
                return  # libuv: EAGAIN ends the loop, and is no short read
            if not d:
                self.ended = True
                return
            self.got += d
            if len(d) < CHUNK:
                partial = True
                break
        if partial and events & select.EPOLLHUP:
            self.ended = True  # what libuv calls the end of the stream


def round_(ls, a):
    server = threading.Thread(target=serve, args=(ls, a.conns), daemon=True)
    server.start()
    clients = [Client(ls.getsockname(), a.bytes) for _ in range(a.conns)]
    ep = select.epoll()
    by_fd = {}
    for c in clients:
        by_fd[c.s.fileno()] = c
        ep.register(c.s.fileno(), select.EPOLLIN | select.EPOLLOUT)
    live = len(clients)
    while live:
        evs = ep.poll(30)
        if not evs:
            fail("no event for 30 s with %d connections open" % live)
        for fd, ev in evs:
            c = by_fd[fd]
            if ev & select.EPOLLOUT:
                c.write()
                if c.shut:
                    ep.modify(fd, select.EPOLLIN)
            if ev & (select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP):
                c.read(ev)
            if c.ended:
                ep.unregister(fd)
                live -= 1
    for i, c in enumerate(clients):
        if bytes(c.got) != c.data:
            k = 0
            while k < len(c.got) and c.got[k] == c.data[k]:
                k += 1
            fail("connection %d read %d bytes of %d, the first %d as sent" % (i, len(c.got), len(c.data), k))
        c.s.close()
    server.join(30)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--bytes", type=int, default=4 << 20)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(a.conns)
    ls.settimeout(30)
    for _ in range(a.rounds):
        round_(ls, a)
    print("hup_reader: OK conns=%d bytes=%d rounds=%d" % (a.conns, a.bytes, a.rounds), flush=True)


if __name__ == "__main__":
    main()

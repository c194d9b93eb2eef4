#!/usr/bin/env python3
"""Readiness in arrival order (tests/integration/epoll-order.sh):

  epoll_order.py [--conns N] [--rounds R]

The kernel's epoll reports sockets in the order they became ready, and
programs rely on it across connections: redis's own tests send a command
on one connection and, without waiting for its answer, one on another that
must see its effect. One process: a listener, N connections, the server's
ends registered with epoll in the reverse of the order the client uses
them. Each round the client thread writes a byte to every connection in
a random order and then tells the server, which waits a little (so that
all are ready), makes one epoll_wait and must get all N, in the order the
client wrote them, then reads the bytes. Edge-triggered: the kernel puts
a level-triggered socket it reported back on its list, in its old place,
until a later wait finds it no longer ready.

Prints "epoll_order: OK conns=N rounds=R" or the round that came out of
order, and exits 1.
"""
import argparse
import os
import random
import select
import socket
import sys
import threading
import time


def fail(msg):
    print("epoll_order: FAIL " + msg, flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args()
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(a.conns)
    ls.settimeout(30)
    clients, servers = [], []
    for _ in range(a.conns):
        c = socket.create_connection(ls.getsockname(), timeout=30)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no write held for an ACK
        s, _ = ls.accept()
        s.settimeout(30)
        # Exchanges each way first: by then both directions settled
        # (under an upgrading policy, in their rings).
        # (128 KiB each way: past the default policy's 64 KiB).
        for _ in range(16):
            c.sendall(b"x" * 8192)
            s.recv(8192, socket.MSG_WAITALL)
            s.sendall(b"y" * 8192)
            c.recv(8192, socket.MSG_WAITALL)
        clients.append(c)
        servers.append(s)
    ep = select.epoll()
    for i in reversed(range(a.conns)):
        servers[i].setblocking(False)
        ep.register(servers[i].fileno(), select.EPOLLIN | select.EPOLLET)
    by_fd = {s.fileno(): i for i, s in enumerate(servers)}
    rng = random.Random(1)
    written = threading.Event()
    order = []

    def client_round():
        for i in order:
            clients[i].sendall(bytes([i]))
            time.sleep(0.0002)
        written.set()

    for r in range(a.rounds):
        order[:] = rng.sample(range(a.conns), a.conns)
        written.clear()
        t = threading.Thread(target=client_round)
        t.start()
        if not written.wait(30):
            fail("round %d: the client did not write" % r)
        t.join()
        time.sleep(0.02)
        evs = ep.poll(5, a.conns)
        got = [by_fd[fd] for fd, ev in evs if ev & select.EPOLLIN]
        if sorted(got) != sorted(order):
            fail("round %d: epoll_wait reported %s, not all of %s" % (r, got, order))
        if got != order:
            fail("round %d: epoll_wait reported %s, written in the order %s" % (r, got, order))
        for i in got:
            if servers[i].recv(16) != bytes([i]):
                fail("round %d: connection %d read other bytes" % (r, i))
    for c in clients + servers:
        c.close()
    print("epoll_order: OK conns=%d rounds=%d" % (a.conns, a.rounds), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An edge-triggered epoll client (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, as
nginx registers its connections) and a plain server, to check that the
edges an application waits for come, once each, as the kernel gives them:

  1. the server sends 256 KiB; the client reads them all as edges come;
  2. idle for 0.6 s: the waits must time out (nothing arrived, nothing
     freed room), bar a few extra events. Reporting EPOLLOUT
     level-triggered here made every wait return at once: a thread at
     full CPU;
  3. the client sends "g", the server 1000 bytes: an EPOLLIN edge within
     10 s, and the client reads them;
  4. the client writes until EAGAIN, then creates --flag; the server, which
     waits for that file, reads everything: an EPOLLOUT edge within 10 s;
     the client shuts down writing, the server reads to the end;
  5. the server closes: an EPOLLIN/EPOLLRDHUP edge, and recv() says end.

Each end checks every byte against a seeded stream and prints one line:

    epoll_et_peer client: idle_events=0 filled=N seen=EVENTS
    epoll_et_peer server: received=N

    epoll_et_peer.py server --port P --flag FILE
    epoll_et_peer.py client --port P --flag FILE
"""
import argparse
import os
import select
import socket
import sys
import time

from peer_streams import accept_one, first_difference, recv_all, stream

FIRST = 256 << 10
SECOND = 1000
FILL_MAX = 32 << 20
EDGE_WAIT = 10.0
IDLE = 0.6


def die(who, msg):
    sys.exit(f"epoll_et_peer {who}: {msg}")


def server(a):
    s = accept_one(a.port)
    s.sendall(stream(1, FIRST))
    if s.recv(1) != b"g":
        die("server", "expected the client's 'g'")
    s.sendall(stream(2, SECOND))
    deadline = time.monotonic() + 60
    while not os.path.exists(a.flag):
        if time.monotonic() > deadline:
            die("server", "the client never filled the connection")
        time.sleep(0.05)
    got = recv_all(s)
    want = stream(3, len(got))
    if got != want:
        die("server", f"the client's bytes differ at {first_difference(got, want)}")
    print(f"epoll_et_peer server: received={len(got)}", flush=True)
    s.close()


def wait_edge(ep, bit, what):
    """Waits up to EDGE_WAIT s for an event with `bit`; returns its events."""
    deadline = time.monotonic() + EDGE_WAIT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            die("client", f"no {what} edge within {EDGE_WAIT} s")
        for _, ev in ep.poll(left):
            if ev & bit:
                return ev


def read_until_eagain(s, got):
    while True:
        try:
            d = s.recv(1 << 16)
        except BlockingIOError:
            return False
        if not d:
            return True
        got += d


def read_expected(s, ep, n, seed, what):
    got = bytearray()
    while len(got) < n:
        if read_until_eagain(s, got):
            die("client", f"end of stream after {len(got)} of the {what}'s {n} bytes")
        if len(got) < n:
            wait_edge(ep, select.EPOLLIN, f"EPOLLIN ({what})")
    want = stream(seed, n)
    if bytes(got) != want:
        die("client", f"the {what}'s bytes differ at {first_difference(bytes(got), want)}")


def client(a):
    s = socket.create_connection(("127.0.0.1", a.port))
    s.setblocking(False)
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET)
    read_expected(s, ep, FIRST, 1, "first burst")
    # Idle for IDLE s: how many waits return with an event. Edges of bytes
    # the reads above already took may still be queued (as from the
    # kernel), and a few more may come of the shim's own control frames
    # on the socket before the client's first write (their acknowledgments
    # make the kernel's EPOLLOUT edges): extra events are allowed, so the
    # script allows a few. Level-triggered, every wait returned at once.
    idle, seen, deadline = 0, [], time.monotonic() + IDLE
    while (left := deadline - time.monotonic()) > 0:
        evs = ep.poll(left)
        if evs:
            idle += 1
            if len(seen) < 8:
                seen += [ev for _, ev in evs]

    s.send(b"g")
    read_expected(s, ep, SECOND, 2, "second burst")
    # Fill: write until the connection takes no more.
    data, filled = stream(3, FILL_MAX), 0
    while True:
        try:
            filled += s.send(data[filled:filled + (1 << 16)])
        except BlockingIOError:
            break
        if filled >= FILL_MAX:
            die("client", f"{FILL_MAX} bytes written and never EAGAIN")
    open(a.flag, "w").close()
    wait_edge(ep, select.EPOLLOUT, "EPOLLOUT (room)")
    s.shutdown(socket.SHUT_WR)
    # An edge may come that finds nothing yet (allowed, as from the kernel):
    # wait for the next one then, until the end.
    rest = bytearray()
    while not read_until_eagain(s, rest):
        wait_edge(ep, select.EPOLLIN | select.EPOLLRDHUP, "EPOLLIN/EPOLLRDHUP (end)")
    if rest:
        die("client", f"expected the end of the stream, read {len(rest)} more bytes")
    print(f"epoll_et_peer client: idle_events={idle} filled={filled} seen={','.join(map(hex, seen)) or '-'}",
          flush=True)
    s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--flag", required=True)
    a = p.parse_args()
    server(a) if a.role == "server" else client(a)


if __name__ == "__main__":
    main()

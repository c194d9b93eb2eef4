#!/usr/bin/env python3
"""idle_crowd: many idle keep-alive connections between two processes, for
scripts/bench-adverse (what a crowd of connections that do nothing costs).

server --port P --conns N [--timeout S]
    One process, one selectors (epoll) loop on 127.0.0.1:P: accepts N
    connections, answers each REQ-byte request with a RESP-byte response
    (as many as come), and exits once all N were accepted and have ended.
    Prints
      idle_crowd server: OK conns=N requests=R
client --port P --conns N [--parallel K] [--timeout S]
    Opens N connections, K (32) at a time, as a pool warming up would:
    each connects, sends one request and reads (and checks) its response,
    and a new one starts as one is done; then prints
      idle_crowd client: ready conns=N setup_s=SECONDS
    and holds them all idle until SIGUSR1 (or the timeout), then closes
    them and prints
      idle_crowd client: OK conns=N
ping --port P [--secs S]
    One more connection, busy beside the crowd: requests one after the
    other for S seconds (default 3), each response read and checked; the
    server must have been started with one connection more. Prints
      idle_crowd ping: OK requests=R rate=R_PER_S
    (what a crowd of idle connections costs a busy one: each of the
    server's waits may look at every registration of its set).
shm PID...
    Shared memory of r2sock mapped by these processes: every mapping whose
    file is one of the shim's ring segments (/dev/shm/r2s-..., or a
    memfd r2s-ring once moved into one), counted once per file however
    many of the processes map it, as the blocks the file holds (pages
    tmpfs handed out, not the size it was given). The shim's statistics
    segments (r2s-stat-PID) are one per process, not per connection, and
    are left out. Reads /proc/PID/map_files: needs root (or
    CAP_SYS_ADMIN). Prints
      idle_crowd shm: segments=K bytes=B size=S

Exit status: 0 OK, 1 failure (message on stderr), 3 timeout.
"""
import argparse
import errno
import os
import selectors
import signal
import socket
import sys
import time

REQ = b"ping" * 4   # 16 bytes
RESP = b"pong" * 4


def die(msg, code=1):
    print(f"idle_crowd: {msg}", file=sys.stderr)
    sys.exit(code)


def server(a):
    ls = socket.create_server(("127.0.0.1", a.port), backlog=4096)
    ls.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    accepted = ended = requests = 0
    pending = {}   # socket -> bytes of a partly received request
    deadline = time.monotonic() + a.timeout
    while accepted < a.conns or ended < accepted:
        left = deadline - time.monotonic()
        if left <= 0:
            die(f"server timed out: accepted={accepted} ended={ended} of {a.conns}", 3)
        # Blocks until something happens: an idle crowd wakes nobody.
        for key, _ in sel.select(left):
            if key.data is None:
                while accepted < a.conns:
                    try:
                        c, _ = ls.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ, True)
                    pending[c] = b""
                    accepted += 1
                if accepted == a.conns:
                    sel.unregister(ls)
                    ls.close()
                continue
            c = key.fileobj
            try:
                data = c.recv(4096)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(c)
                c.close()
                del pending[c]
                ended += 1
                continue
            buf = pending[c] + data
            while len(buf) >= len(REQ):
                if buf[:len(REQ)] != REQ:
                    die(f"server: unexpected request bytes {buf[:len(REQ)]!r}")
                buf = buf[len(REQ):]
                # 16 bytes into an idle socket's empty send buffer: all of
                # them or an error, never part.
                if c.send(RESP) != len(RESP):
                    die("server: short send of a 16-byte response")
                requests += 1
            pending[c] = buf
    print(f"idle_crowd server: OK conns={a.conns} requests={requests}", flush=True)


def client(a):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    sel = selectors.DefaultSelector()
    deadline = time.monotonic() + a.timeout
    t0 = time.monotonic()
    idle = []      # connections done with their request, held open
    started = 0
    while len(idle) < a.conns:
        while started < a.conns and started - len(idle) < a.parallel:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            rc = s.connect_ex(("127.0.0.1", a.port))
            if rc not in (0, errno.EINPROGRESS):
                die(f"client: connect: {os.strerror(rc)}")
            sel.register(s, selectors.EVENT_WRITE, [b""])   # connecting
            started += 1
        left = deadline - time.monotonic()
        if left <= 0:
            die(f"client timed out: {len(idle)} of {a.conns} connections ready", 3)
        for key, events in sel.select(left):
            s, got = key.fileobj, key.data
            if events & selectors.EVENT_WRITE:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    die(f"client: connect: {os.strerror(err)}")
                # 16 bytes into a new socket's empty send buffer: all of
                # them or an error, never part.
                if s.send(REQ) != len(REQ):
                    die("client: short send of a 16-byte request")
                sel.modify(s, selectors.EVENT_READ, got)
                continue
            try:
                d = s.recv(len(RESP) - len(got[0]))
            except BlockingIOError:
                continue
            if not d:
                die(f"client: end of stream after {len(got[0])} of {len(RESP)} response bytes")
            got[0] += d
            if len(got[0]) == len(RESP):
                if got[0] != RESP:
                    die(f"client: unexpected response {got[0]!r}")
                sel.unregister(s)
                idle.append(s)
    setup = time.monotonic() - t0
    print(f"idle_crowd client: ready conns={len(idle)} setup_s={setup:.3f}", flush=True)
    if signal.sigtimedwait([signal.SIGUSR1], max(deadline - time.monotonic(), 0)) is None:
        die("client: no SIGUSR1 before the timeout", 3)
    for s in idle:
        s.close()
    print(f"idle_crowd client: OK conns={len(idle)}", flush=True)


def shm(a):
    seen = {}   # (dev, ino) -> (blocks, size)
    for pid in a.pids:
        d = f"/proc/{pid}/map_files"
        try:
            names = os.listdir(d)
        except OSError as e:
            die(f"shm: cannot list {d}: {e.strerror} (needs root)")
        for n in names:
            p = os.path.join(d, n)
            try:
                target = os.readlink(p)
                if "r2s-" not in target or "r2s-stat-" in target:
                    continue
                st = os.stat(p)
            except FileNotFoundError:
                continue   # unmapped meanwhile
            seen[(st.st_dev, st.st_ino)] = (st.st_blocks * 512, st.st_size)
    used = sum(b for b, _ in seen.values())
    size = sum(s for _, s in seen.values())
    print(f"idle_crowd shm: segments={len(seen)} bytes={used} size={size}")


def ping(a):
    s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = 0
    start = time.monotonic()
    end = start + a.secs
    while time.monotonic() < end:
        s.sendall(REQ)
        got = b""
        while len(got) < len(RESP):
            more = s.recv(len(RESP) - len(got))
            if not more:
                die("ping: the server closed the connection")
            got += more
        if got != RESP:
            die(f"ping: response {got!r}, expected {RESP!r}")
        n += 1
    took = time.monotonic() - start
    s.close()
    print(f"idle_crowd ping: OK requests={n} rate={n / took:.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description="many idle keep-alive connections")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("server", "client"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--conns", type=int, required=True)
        p.add_argument("--timeout", type=float, default=600)
        if name == "client":
            p.add_argument("--parallel", type=int, default=32)
    p = sub.add_parser("ping")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--secs", type=float, default=3)
    p = sub.add_parser("shm")
    p.add_argument("pids", type=int, nargs="+")
    a = ap.parse_args()
    {"server": server, "client": client, "ping": ping, "shm": shm}[a.cmd](a)


if __name__ == "__main__":
    main()

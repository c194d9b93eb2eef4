#!/usr/bin/env python3
"""Connections checked the way curl checks a nonblocking connect (for
mixed-connect.sh).

server --port P --conns N
    Accepts N connections one after the other; on each reads one line and
    sends it back, then waits for the client's end. Prints
    "connect_peer server: OK conns=N".
client --port P --conns N
    N times: a nonblocking connect, then poll(POLLOUT|POLLPRI) until the
    connect completes. curl 7.88 takes any POLLPRI in that answer for a
    failed connect, so the client fails if one shows up; it also looks for
    POLLPRI once more 50 ms later. Then it sends a line and expects it back.
    Prints "connect_peer client: OK conns=N".
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import select
import socket
import sys
import time

DEADLINE = 20.0


def die(msg):
    print("connect_peer: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def read_line(s):
    s.settimeout(DEADLINE)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            die("end of stream before a whole line; got %r" % buf)
        buf += chunk
    return buf


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(16)
    ls.settimeout(DEADLINE)
    for _ in range(args.conns):
        c, _ = ls.accept()
        c.sendall(read_line(c))
        c.settimeout(DEADLINE)
        while c.recv(4096):
            pass
        c.close()
    print("connect_peer server: OK conns=%d" % args.conns, flush=True)


def client(args):
    for i in range(args.conns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", args.port))
        except BlockingIOError:
            pass
        p = select.poll()
        p.register(s.fileno(), select.POLLOUT | select.POLLPRI)
        ev = p.poll(int(DEADLINE * 1000))
        if not ev:
            die("connection %d: connect did not complete in %gs" % (i, DEADLINE))
        rev = ev[0][1]
        if rev & select.POLLPRI:
            die("connection %d: POLLPRI while the connect completed (revents=%#x): "
                "curl takes that for a failed connect" % (i, rev))
        time.sleep(0.05)
        rev = dict(p.poll(0)).get(s.fileno(), 0)
        if rev & select.POLLPRI:
            die("connection %d: POLLPRI 50 ms after connecting (revents=%#x)" % (i, rev))
        s.setblocking(True)
        line = b"line %d\n" % i
        s.sendall(line)
        got = read_line(s)
        if got != line:
            die("connection %d: sent %r, got back %r" % (i, line, got))
        s.shutdown(socket.SHUT_WR)
        s.close()
    print("connect_peer client: OK conns=%d" % args.conns, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, default=20)
    args = ap.parse_args()
    server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    main()

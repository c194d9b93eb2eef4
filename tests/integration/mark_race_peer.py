#!/usr/bin/env python3
"""A greeting followed closely by the switch mark (mark-race.sh).

server --port P --conns N
    Plain (never under the shim): speaks r2sock's protocol by hand as a shim
    server that speaks first would. For each of N connections it sends the
    urgent hello, a greeting, then, after a delay that sweeps 0..80 us, the
    urgent switch mark and one DATA frame; then half-closes and reads the
    client's bytes (its hello, handshake and frames) until EOF. The mark so
    replaces the hello while the client's first read of the greeting is
    between its system calls, in some of the connections.
client --port P --conns N
    Under the shim: for each connection reads until EOF and checks that it
    got the greeting, then the DATA frame's payload, and nothing else.
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import socket
import struct
import sys
import time

HELLO, SWITCH = b"H", b"U"
FRAME_DATA = 2
DEADLINE = 30.0


def greeting(i):
    return b"220 mark-race greeting %06d ready\r\n" % i


def payload(i):
    return b"payload after the mark %06d\n" % i


def spin(us):
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def serve(s, i):
    s.settimeout(DEADLINE)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.send(HELLO, socket.MSG_OOB)
    s.sendall(greeting(i))
    spin(i % 81)
    s.send(SWITCH, socket.MSG_OOB)
    p = payload(i)
    s.sendall(struct.pack("<BBHI", FRAME_DATA, 0, 0, len(p)) + p)
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(8)
    for i in range(args.conns):
        s, _ = ls.accept()
        try:
            serve(s, i)
        except OSError:
            pass  # a client that misread the stream resets it: its side reports that
        s.close()
    ls.close()


def client(args):
    bad = 0
    for i in range(args.conns):
        s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
        got, err = b"", None
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except OSError as e:
            err = e
        s.close()
        want = greeting(i) + payload(i)
        if got != want or err:
            bad += 1
            print(f"connection {i}: read {got[:80]!r} ({len(got)} bytes), error {err}; expected {want!r}",
                  file=sys.stderr)
    print(f"mark_race_peer client: conns={args.conns} bad={bad}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, default=500)
    args = ap.parse_args()
    if args.role == "server":
        server(args)
        return 0
    return client(args)


if __name__ == "__main__":
    sys.exit(main())

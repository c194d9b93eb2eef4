#!/usr/bin/env python3
"""A connection that moves a known number of bytes and then stays open until
the test lets it go, so that its statistics can be read while it lives (for
statseg.sh export).

server --port P --bytes N
    Accepts one connection, answers the client's 64-byte request with 64
    bytes, reads N bytes and checks them against the seeded stream, answers
    "ok", then waits for the client's end of stream. Prints
      hold_peer server: received=N
client --port P --bytes N
    Connects, sends the request and reads the answer (so that both shims
    have heard each other before the bulk), sends N bytes of the seeded
    stream and reads the "ok". Prints
      hold_peer client: sent=N
    then waits until its standard input ends, and closes.
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import socket
import sys

from peer_streams import accept_one, expect_same, recv_exactly, stream

SEED = 7
MSG = 64


def server(a):
    s = accept_one(a.port)
    recv_exactly(s, MSG, "hold_peer server")
    s.sendall(b"a" * MSG)
    expect_same("hold_peer server: the client's bytes", recv_exactly(s, a.bytes, "hold_peer server"),
                stream(SEED, a.bytes))
    s.sendall(b"ok")
    print(f"hold_peer server: received={a.bytes}", flush=True)
    if s.recv(1):
        sys.exit("hold_peer server: bytes after the stream, expected its end")
    s.close()


def client(a):
    s = socket.create_connection(("127.0.0.1", a.port))
    s.sendall(b"q" * MSG)
    recv_exactly(s, MSG, "hold_peer client")
    s.sendall(stream(SEED, a.bytes))
    if recv_exactly(s, 2, "hold_peer client") != b"ok":
        sys.exit("hold_peer client: expected the server's ok")
    print(f"hold_peer client: sent={a.bytes}", flush=True)
    sys.stdin.buffer.read()
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("server", "client"))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bytes", type=int, required=True)
    a = ap.parse_args()
    try:
        (server if a.role == "server" else client)(a)
    except (OSError, AssertionError) as e:
        sys.exit(f"hold_peer {a.role}: {e}")


if __name__ == "__main__":
    main()

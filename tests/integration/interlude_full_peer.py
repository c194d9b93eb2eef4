#!/usr/bin/env python3
"""The answer of an end with no ring to offer, owed while its socket is full
(tests/integration/interlude-full.sh).

server --port P
    Accepts one connection, sends HEAD bytes at once (its shim switches and
    sends its handshake), then reads nothing for PAUSE seconds, so that the
    client's socket fills up; then reads the client's stream to its end,
    checks it and sends TAIL bytes more (plain TCP again, if its shim heard
    the client's answer) and half-closes. Prints
      interlude_full_peer server: received=N sent=M
client --port P
    Shrinks its send buffer and sends BODY bytes from a thread at once,
    then half-closes; its main thread reads the server's HEAD bytes only
    after the socket is full (its shim reads the server's handshake then and
    owes its answer, which cannot go), then the TAIL, and checks both.
    Prints
      interlude_full_peer client: received=N sent=M
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import socket
import sys
import time

from peer_streams import accept_one, expect_same, recv_all, recv_exactly, send_in_background, stream

HEAD = 64 << 10
BODY = 4 << 20
TAIL = 1 << 20
PAUSE = 1.0
DEADLINE = 60.0


def server(port):
    s = accept_one(port)
    s.settimeout(DEADLINE)
    s.sendall(stream(1, HEAD))
    time.sleep(PAUSE)
    got = recv_all(s)
    expect_same("the client's stream", got, stream(2, BODY))
    s.sendall(stream(3, TAIL))
    s.shutdown(socket.SHUT_WR)
    s.close()
    print(f"interlude_full_peer server: received={len(got)} sent={HEAD + TAIL}", flush=True)


def client(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    s.settimeout(DEADLINE)
    s.connect(("127.0.0.1", port))
    join = send_in_background(s, stream(2, BODY))
    time.sleep(PAUSE / 4)  # the server reads nothing yet: the socket is full by now
    head = recv_exactly(s, HEAD, "interlude_full_peer client")
    expect_same("the server's first bytes", head, stream(1, HEAD))
    tail = recv_all(s)
    expect_same("the server's last bytes", tail, stream(3, TAIL))
    join(DEADLINE)
    s.close()
    print(f"interlude_full_peer client: received={HEAD + len(tail)} sent={BODY}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    server(a.port) if a.role == "server" else client(a.port)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, EOFError, AssertionError) as e:
        print(f"interlude_full_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

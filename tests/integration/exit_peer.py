#!/usr/bin/env python3
"""A client that exits with its stream still queued, and a server that reads
it late (for exit-linger.sh).

client --port P --mode fill
    Connects, writes a counted pattern without blocking until the socket
    buffers are full (the kernel says EAGAIN), closes and exits at once:
    the tail is still in our kernel's send queue. Prints
    "exit_peer client: wrote N pid=PID".
client --port P --mode clean
    Connects, writes 64 KiB of the pattern, shuts down its direction, reads
    the server's reply to the end, closes and exits: nothing is left to
    finish. Prints "exit_peer client: wrote N, reply OK pid=PID".
server --port P [--go FILE]
    Accepts one connection. With --go, reads nothing until FILE exists and
    holds the byte count the client wrote (the client has exited by then).
    Then reads to the end of the stream, checks every byte against the
    pattern and the count, replies "OK\\n", closes. Prints
    "exit_peer server: OK bytes=N".
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import os
import socket
import sys
import time

DEADLINE = 40.0
PERIOD = 251  # a prime: a lost or repeated block shows at any length
PATTERN = bytes(range(PERIOD)) * 2048


def die(msg):
    print("exit_peer: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def chunk(offset, length):
    start = offset % PERIOD
    return PATTERN[start:start + length]


def client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    sent = 0
    if args.mode == "fill":
        s.setblocking(False)
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            try:
                sent += s.send(chunk(sent, 65536))
            except BlockingIOError:
                break
        else:
            die("the socket never filled up in %ds (wrote %d bytes)" % (DEADLINE, sent))
        s.close()
        print("exit_peer client: wrote %d pid=%d" % (sent, os.getpid()), flush=True)
        return
    while sent < 65536:
        sent += s.send(chunk(sent, 65536 - sent))
    s.shutdown(socket.SHUT_WR)
    reply = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        reply += b
    s.close()
    if reply != b"OK\n":
        die("expected the reply 'OK\\n', got %r" % reply)
    print("exit_peer client: wrote %d, reply OK pid=%d" % (sent, os.getpid()), flush=True)


def wait_go(path):
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    die("no byte count in %s after %ds" % (path, DEADLINE))


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(1)
    ls.settimeout(DEADLINE)
    c, _ = ls.accept()
    c.settimeout(DEADLINE)
    want = wait_go(args.go) if args.go else None
    got = 0
    while True:
        try:
            b = c.recv(65536)
        except ConnectionResetError:
            die("connection reset after %d bytes (expected %s)" % (got, want))
        if not b:
            break
        if b != chunk(got, len(b)):
            die("byte pattern differs in the %d bytes at offset %d" % (len(b), got))
        got += len(b)
    if want is not None and got != want:
        die("end of stream after %d bytes, the client wrote %d (%d lost)" % (got, want, want - got))
    c.sendall(b"OK\n")
    c.close()
    ls.close()
    print("exit_peer server: OK bytes=%d" % got, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["client", "server"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["fill", "clean"], default="fill")
    ap.add_argument("--go")
    args = ap.parse_args()
    (client if args.role == "client" else server)(args)


if __name__ == "__main__":
    main()

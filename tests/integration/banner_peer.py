#!/usr/bin/env python3
"""A server that speaks first, and its client (for mixed-banner.sh).

server --port P [--conns N] [--banner-bytes B] [--seed S]
    Listens on 127.0.0.1:P. For each of N connections, one after the other:
    sends the banner at once on accept (before reading anything), then echoes
    every byte it receives until EOF, then closes.
client --port P --in FILE --out FILE [--banner-bytes B] [--seed S]
    Connects, reads the banner and checks it byte for byte before sending
    anything (as an SMTP or FTP client does), then sends FILE while a second
    thread reads the echo into --out; half-closes after the last byte and
    reads to EOF.

The banner is a text line followed by B pseudo-random bytes from the seed, so
both ends know it. Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import random
import socket
import sys

from peer_streams import send_in_background


def banner(nbytes, seed):
    return b"220 r2sock banner test, server speaks first\r\n" + random.Random(seed).randbytes(nbytes)


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} banner bytes")
        buf += chunk
    return bytes(buf)


def server(args):
    ban = banner(args.banner_bytes, args.seed)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(8)
    for i in range(args.conns):
        conn, peer = ls.accept()
        with conn:
            conn.sendall(ban)
            echoed = 0
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data)
                echoed += len(data)
            conn.shutdown(socket.SHUT_WR)
        print(f"banner_peer server: conn {i} from {peer[0]}: banner {len(ban)} bytes, echoed {echoed} bytes", flush=True)
    ls.close()
    return 0


def client(args):
    ban = banner(args.banner_bytes, args.seed)
    with open(args.infile, "rb") as f:
        payload = f.read()
    s = socket.create_connection(("127.0.0.1", args.port), timeout=30)
    got = recv_exact(s, len(ban))
    if got != ban:
        first = next(i for i in range(len(ban)) if got[i] != ban[i])
        print(f"banner_peer client: banner differs at byte {first}: got {got[first]:#04x}, expected {ban[first]:#04x}",
              file=sys.stderr)
        return 1
    join = send_in_background(s, payload)
    received = 0
    with open(args.outfile, "wb") as out:
        while True:
            data = s.recv(65536)
            if not data:
                break
            out.write(data)
            received += len(data)
    s.close()
    try:
        join(60)
    except AssertionError as e:
        print(f"banner_peer client: {e}", file=sys.stderr)
        return 1
    print(f"banner_peer client: banner {len(ban)} bytes OK, sent {len(payload)}, echo {received} bytes", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--banner-bytes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--in", dest="infile")
    p.add_argument("--out", dest="outfile")
    args = p.parse_args()
    if args.role == "server":
        return server(args)
    if not args.infile or not args.outfile:
        p.error("client needs --in and --out")
    return client(args)


if __name__ == "__main__":
    sys.exit(main())

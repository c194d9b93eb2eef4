#!/usr/bin/env python3
"""Urgent data sent after both directions moved into rings (oob-after-ring.sh).

server --port P --seed S --a-bytes NA --b-bytes NB --y-bytes NY [--answer-at-once NE]
    Accepts one connection, sends the first NE bytes of its answer at once
    (default 0) and reads A; then a second thread sends the rest of its NY
    pseudo-random bytes (seed S+2) and half-closes; the main thread reads
    the rest in-band until EOF and checks that it is exactly A+B (seeds S and S+1),
    the urgent byte left out as TCP does with SO_OOBINLINE off. Prints:
      oob_ring_peer server: in_band=N sent=NY
client --port P --seed S --a-bytes NA --b-bytes NB --y-bytes NY
    Sends A, one urgent byte '!' with MSG_OOB (corked: TCP_CORK and
    TCP_NODELAY must read as the application left them once it is sent,
    however the shim set them for its frames), then reads the server's NY
    bytes in small slices with short pauses (so that the server's sender
    keeps finding the client's ring full and goes to sleep on it, again and
    again, after the client's send direction went plain), checks them, then
    sends B and half-closes.
The server's sender sleeping on a full ring is what makes the client's shim
want to ring a doorbell; with the client's direction plain again, a doorbell
frame there would reach the server's application as 8 bytes of data.
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import socket
import sys
import threading
import time

from peer_streams import first_difference, stream

URGENT = b"!"
DEADLINE = 60.0


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(1)
    s, _ = ls.accept()
    ls.close()
    s.settimeout(DEADLINE)
    send_error = []
    answer = stream(args.seed + 2, args.y_bytes)
    early = min(args.answer_at_once, args.y_bytes)

    def sender():
        try:
            s.sendall(answer[early:])
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            send_error.append(e)

    # Bytes answered at once lie in front of our RING frame (sent once our
    # shim has read the client's handshake, among the bytes of A): the
    # client's shim, whose urgent byte waits for that frame, must read past
    # them although its application reads only after sending that byte
    # (docs/protocol.md, "Application bytes in front of control frames").
    # The rest of the answer starts once A is in, when both ends have
    # switched.
    if early:
        s.sendall(answer[:early])
    data = bytearray()
    while len(data) < args.a_bytes:
        chunk = s.recv(args.a_bytes - len(data))
        if not chunk:
            raise EOFError(f"EOF after {len(data)} of the {args.a_bytes} bytes of A")
        data.extend(chunk)
    t = threading.Thread(target=sender)
    t.start()
    # The application reads on without asking for the urgent byte: with
    # SO_OOBINLINE off, TCP leaves it out of the in-band bytes, which are
    # then exactly A+B.
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data.extend(chunk)
    t.join()
    s.close()
    print(f"oob_ring_peer server: in_band={len(data)} sent={args.y_bytes}", flush=True)
    if send_error:
        print(f"oob_ring_peer server: sending failed: {send_error[0]}", file=sys.stderr)
        return 1
    want = stream(args.seed, args.a_bytes) + stream(args.seed + 1, args.b_bytes)
    if data != want:
        i = first_difference(data, want)
        print(f"oob_ring_peer server: in-band stream differs at offset {i} of {len(want)} (got {len(data)} bytes):"
              f" got {bytes(data[i:i + 16]).hex()} want {want[i:i + 16].hex()}", file=sys.stderr)
        return 1
    return 0


def client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    s.sendall(stream(args.seed, args.a_bytes))
    # TCP_CORK, set while the direction is in the ring (the shim keeps it
    # aside there: its frames go out at once), must be the kernel's once
    # the urgent byte sent the direction back to plain TCP, and TCP_NODELAY,
    # never set, the kernel's default (the shim turned Nagle off for its
    # frames). Uncorked right after, which sends the urgent byte.
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) != 1:
        print("oob_ring_peer client: TCP_CORK set to 1 reads back as 0", file=sys.stderr)
        return 1
    if s.send(URGENT, socket.MSG_OOB) != 1:
        print("oob_ring_peer client: send(MSG_OOB) did not take the byte", file=sys.stderr)
        return 1
    nodelay = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    cork = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    if nodelay != 0 or cork != 1:
        print(f"oob_ring_peer client: after the urgent byte TCP_NODELAY={nodelay} TCP_CORK={cork}, expected 0 and 1"
              " (the application's)", file=sys.stderr)
        return 1
    got = bytearray()
    reads = 0
    while True:
        chunk = s.recv(16384)
        if not chunk:
            break
        got += chunk
        reads += 1
        if reads % 8 == 0:
            time.sleep(0.002)
    want = stream(args.seed + 2, args.y_bytes)
    if got != want:
        i = first_difference(got, want)
        print(f"oob_ring_peer client: the server's stream differs at offset {i} (got {len(got)} of {len(want)})",
              file=sys.stderr)
        return 1
    s.sendall(stream(args.seed + 1, args.b_bytes))
    s.shutdown(socket.SHUT_WR)
    if s.recv(1):
        print("oob_ring_peer client: bytes after the server's end of stream", file=sys.stderr)
        return 1
    s.close()
    print(f"oob_ring_peer client: sent {args.a_bytes} + urgent + {args.b_bytes}, verified {len(got)}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--a-bytes", type=int, required=True)
    p.add_argument("--b-bytes", type=int, required=True)
    p.add_argument("--y-bytes", type=int, required=True)
    p.add_argument("--answer-at-once", type=int, default=0)
    args = p.parse_args()
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, EOFError, TimeoutError) as e:
        print(f"oob_ring_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

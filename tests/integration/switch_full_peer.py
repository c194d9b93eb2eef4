#!/usr/bin/env python3
"""A switch to the ring while the socket is full of DATA frames, then a
half-close (tests/integration/switch-full.sh). Both ends shrink their
socket buffers. The server writes chunks of CHUNK bytes of a seeded stream
without blocking, from before the client's request (so its shim sends DATA
frames, waiting for the client's handshake), until its writes have made no
progress for a second; the client sends its request (its handshake) only
after a pause and reads nothing until much later, so the server's shim
learns of the client's ring while the socket is full. The server then shuts
its side down and says how much it sent; the client reads to the end of the
stream and says how much it received, which must be all of it:

    switch_full_peer server: sent=N
    switch_full_peer client: received=N

    switch_full_peer.py server --port P --chunk CHUNK
    switch_full_peer.py client --port P
"""
import argparse
import socket
import sys
import time

from peer_streams import accept_one, first_difference, recv_all, stream

TOTAL = 16 << 20
BUF = 8192


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=100)
    a = ap.parse_args()
    data = stream(11, TOTAL)
    if a.role == "server":
        s = accept_one(a.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUF)
        time.sleep(0.2)  # the client's hello is in: the first write switches
        s.setblocking(False)
        sent, stuck_since = 0, None
        while sent < TOTAL:
            try:
                sent += s.send(data[sent : sent + a.chunk])
                stuck_since = None
            except BlockingIOError:
                stuck_since = stuck_since or time.monotonic()
                if time.monotonic() - stuck_since > 1.0:
                    break
                time.sleep(0.005)
        s.setblocking(True)
        s.shutdown(socket.SHUT_WR)
        print(f"switch_full_peer server: sent={sent}", flush=True)
        if s.recv(16) != b"GET" or s.recv(1) != b"":
            sys.exit("switch_full_peer server: expected the request, then the end of the stream")
    else:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
        s.connect(("127.0.0.1", a.port))
        time.sleep(0.6)  # the server's socket is full of frames by now
        s.sendall(b"GET")
        time.sleep(1.8)  # the server gives up and shuts down meanwhile
        got = recv_all(s)
        bad = first_difference(got, data[: len(got)])
        if bad < len(got):
            sys.exit(f"switch_full_peer client: byte {bad} of the {len(got)} received differs")
        print(f"switch_full_peer client: received={len(got)}", flush=True)
        s.shutdown(socket.SHUT_WR)
    s.close()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An abortive close (SO_LINGER on, 0 s): the server answers a request with
up to N bytes of a seeded stream (as many as the connection takes while the client
does not read), then closes with a reset. The client reads only once the
server is gone and must end with ECONNRESET, never a clean end of stream,
having read a prefix of the server's bytes (tests/integration/abort-close.sh). Prints

    abort_peer client: received=BYTES end=reset

    abort_peer.py server --port P --bytes N
    abort_peer.py client --port P --bytes N --after SECONDS
"""
import argparse
import socket
import struct
import sys
import time

from peer_streams import accept_one, first_difference, stream


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--after", type=float, default=1.0)
    a = ap.parse_args()
    data = stream(7, a.bytes)
    if a.role == "server":
        s = accept_one(a.port)
        if s.recv(16) != b"GET":
            sys.exit("abort_peer server: no request")
        s.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 20
        # As much as the connection takes without the client reading: TCP's
        # buffers, or the ring.
        while sent < len(data) and time.monotonic() < deadline:
            try:
                sent += s.send(data[sent:])
            except BlockingIOError:
                time.sleep(0.05)
                try:
                    sent += s.send(data[sent:])
                except BlockingIOError:
                    break
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        print(f"abort_peer server: sent={sent} closed=abort", flush=True)
    else:
        s = socket.create_connection(("127.0.0.1", a.port))
        # Under the shim, a request sent after the server's hello has come
        # carries the client's handshake, and the reply goes into its ring.
        time.sleep(0.3)
        s.sendall(b"GET")
        time.sleep(a.after)  # the server is gone by now
        got = bytearray()
        end = "eof"
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
        except ConnectionResetError:
            end = "reset"
        bad = first_difference(bytes(got), data[: len(got)])
        if bad < len(got):
            sys.exit(f"abort_peer client: byte {bad} of the {len(got)} received differs from the server's")
        print(f"abort_peer client: received={len(got)} end={end}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Both ends of a request and a reply with a pause before each, so that each
end blocks in recv() while its peer is idle: the server waits for the
request, the client for the reply. Each end prints how long its blocked
recv lasted and how much CPU its thread used meanwhile:

    idle_peer server: waited=SECONDS cpu=SECONDS
    idle_peer client: waited=SECONDS cpu=SECONDS

A blocked read must sleep, not poll the socket (tests/integration/idle-wait.sh).

    idle_peer.py server --port P --pause S
    idle_peer.py client --port P --pause S

With --write N the roles turn: after the request the server sends N bytes
with one blocking sendall while the client sleeps PAUSE seconds before it
reads them all, so the server's writer blocks on a full connection:

    idle_peer server: sent=N waited=SECONDS cpu=SECONDS
    idle_peer client: received=N
"""
import argparse
import resource
import socket
import sys
import time

from peer_streams import accept_one, first_difference, recv_all, recv_exactly, stream

MSG = 64


def cpu():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def timed_recv(s, who):
    t0, c0 = time.monotonic(), cpu()
    data = s.recv(MSG)
    waited, used = time.monotonic() - t0, cpu() - c0
    print(f"idle_peer {who}: waited={waited:.3f} cpu={used:.3f}", flush=True)
    return data


def recv_msg(s, data, who):
    """The rest of a MSG-byte message whose first bytes are data."""
    return data + recv_exactly(s, MSG - len(data), f"idle_peer {who}")


def blocked_writer(a, request):
    data = stream(5, a.write)
    if a.role == "server":
        s = accept_one(a.port)
        if recv_msg(s, b"", "server") != request:
            sys.exit("idle_peer server: the request differs from what was sent")
        t0, c0 = time.monotonic(), cpu()
        s.sendall(data)
        waited, used = time.monotonic() - t0, cpu() - c0
        print(f"idle_peer server: sent={len(data)} waited={waited:.3f} cpu={used:.3f}", flush=True)
        s.shutdown(socket.SHUT_WR)
        if s.recv(1) != b"":
            sys.exit("idle_peer server: bytes after the request")
    else:
        s = socket.create_connection(("127.0.0.1", a.port))
        time.sleep(0.3)  # the server's hello is back: the request switches
        s.sendall(request)
        time.sleep(a.pause)
        got = recv_all(s)
        bad = first_difference(got, data)
        if bad < max(len(got), len(data)):
            sys.exit(f"idle_peer client: byte {bad} differs (received {len(got)} of {len(data)})")
        print(f"idle_peer client: received={len(got)}", flush=True)
        s.shutdown(socket.SHUT_WR)
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pause", type=float, default=1.5)
    ap.add_argument("--write", type=int, default=0)
    a = ap.parse_args()
    request, reply = bytes(range(MSG)), bytes(reversed(range(MSG)))
    if a.write:
        blocked_writer(a, request)
        return
    if a.role == "server":
        s = accept_one(a.port)
        got = recv_msg(s, timed_recv(s, "server"), "server")
        if got != request:
            sys.exit("idle_peer server: the request differs from what was sent")
        time.sleep(a.pause)
        s.sendall(reply)
        if s.recv(1) != b"":
            sys.exit("idle_peer server: bytes after the request")
    else:
        s = socket.create_connection(("127.0.0.1", a.port))
        time.sleep(a.pause)
        s.sendall(request)
        got = recv_msg(s, timed_recv(s, "client"), "client")
        if got != reply:
            sys.exit("idle_peer client: the reply differs from what was sent")
        s.shutdown(socket.SHUT_WR)
    s.close()


if __name__ == "__main__":
    main()

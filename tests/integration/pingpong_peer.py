#!/usr/bin/env python3
"""Rounds of a 64-byte request and its 64-byte reply on one connection, the
client pausing before each request, so that the server's recv() blocks for
about that pause every round. Requests and replies are bytes of two seeded
streams, each checked on arrival. With --select the server waits in
select() before each request, as iperf3's server does. At the end each side
prints its rounds and the CPU seconds its rounds took:

    pingpong_peer server: rounds=N cpu=SECONDS
    pingpong_peer client: rounds=N cpu=SECONDS

    pingpong_peer.py server --port P --rounds N [--select]
    pingpong_peer.py client --port P --rounds N --pause SECONDS
"""
import argparse
import select
import socket
import sys
import time

from peer_streams import accept_one, first_difference, recv_exactly, stream

MSG = 64


def check(got, want, who, what, i):
    bad = first_difference(got, want)
    if bad < len(want):
        sys.exit(f"pingpong_peer {who}: byte {bad} of {what} {i} differs")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--select", action="store_true")
    a = p.parse_args()
    requests, replies = stream(1, MSG * a.rounds), stream(2, MSG * a.rounds)
    if a.role == "server":
        s = accept_one(a.port)
    else:
        s = socket.create_connection(("127.0.0.1", a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cpu = time.process_time()
    for i in range(a.rounds):
        req, rep = requests[i * MSG:(i + 1) * MSG], replies[i * MSG:(i + 1) * MSG]
        if a.role == "server":
            if a.select and not select.select([s], [], [], 60)[0]:
                sys.exit(f"pingpong_peer server: no request {i} within 60 s")
            check(recv_exactly(s, MSG, "pingpong_peer server"), req, "server", "request", i)
            s.sendall(rep)
        else:
            time.sleep(a.pause)
            s.sendall(req)
            check(recv_exactly(s, MSG, "pingpong_peer client"), rep, "client", "reply", i)
    cpu = time.process_time() - cpu
    s.shutdown(socket.SHUT_WR)
    if s.recv(1) != b"":
        sys.exit(f"pingpong_peer {a.role}: bytes after the last round")
    s.close()
    print(f"pingpong_peer {a.role}: rounds={a.rounds} cpu={cpu:.3f}", flush=True)


if __name__ == "__main__":
    main()

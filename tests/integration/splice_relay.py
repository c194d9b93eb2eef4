#!/usr/bin/env python3
"""A relay that moves bytes with splice(2) only, as haproxy's
splice-request and splice-response do (tests/integration/splice.sh):

  splice_relay.py --listen PORT --to PORT [--mode block|nonblock]

Accepts one connection, connects to 127.0.0.1:--to, and relays both
directions through a pipe each, never reading a byte into its own memory:
os.splice from one socket into the pipe, then from the pipe into the other
socket. block: one thread per direction, blocking sockets and pipes.
nonblock: one thread, nonblocking sockets and pipes, SPLICE_F_NONBLOCK,
and select() for readiness (what an event loop does). A direction ends at
its source's end of stream: the relay then shuts down the writing side of
the other socket (a half-close, passed on). Prints
    splice_relay: OK up=BYTES down=BYTES
once both directions ended; exits 1 on any error.
"""
import argparse
import os
import select
import socket
import sys
import threading

CHUNK = 1 << 16


def pump_blocking(src, dst, out, key):
    r, w = os.pipe()
    moved = 0
    while True:
        n = os.splice(src.fileno(), w, CHUNK)
        if n == 0:
            break
        left = n
        while left:
            left -= os.splice(r, dst.fileno(), left)
        moved += n
    dst.shutdown(socket.SHUT_WR)
    out[key] = moved


def relay_nonblocking(a, b):
    """Both directions in one select() loop."""
    flags = os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE
    dirs = []
    for src, dst in ((a, b), (b, a)):
        r, w = os.pipe2(os.O_NONBLOCK)
        dirs.append({"src": src, "dst": dst, "r": r, "w": w, "held": 0, "eof": False, "moved": 0, "done": False})
    for s in (a, b):
        s.setblocking(False)
    while not all(d["done"] for d in dirs):
        rl = [d["src"] for d in dirs if not d["eof"] and d["held"] < CHUNK]
        wl = [d["dst"] for d in dirs if d["held"]]
        readable, writable, _ = select.select(rl, wl, [], 30)
        if not readable and not writable:
            sys.exit("splice_relay: nothing moved for 30 s")
        for d in dirs:
            if d["src"] in readable and not d["eof"]:
                try:
                    n = os.splice(d["src"].fileno(), d["w"], CHUNK - d["held"], flags=flags)
                    if n == 0:
                        d["eof"] = True
                    d["held"] += n
                except BlockingIOError:
                    pass
            if d["held"] and d["dst"] in writable:
                try:
                    n = os.splice(d["r"], d["dst"].fileno(), d["held"], flags=flags)
                    d["held"] -= n
                    d["moved"] += n
                except BlockingIOError:
                    pass
            if d["eof"] and not d["held"] and not d["done"]:
                d["dst"].shutdown(socket.SHUT_WR)
                d["done"] = True
    return dirs[0]["moved"], dirs[1]["moved"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--to", type=int, required=True)
    p.add_argument("--mode", choices=["block", "nonblock"], default="block")
    a = p.parse_args()
    ls = socket.create_server(("127.0.0.1", a.listen))
    ls.settimeout(30)
    down, _ = ls.accept()
    up = socket.create_connection(("127.0.0.1", a.to), timeout=30)
    down.settimeout(None)
    up.settimeout(None)
    if a.mode == "block":
        out = {}
        t = [threading.Thread(target=pump_blocking, args=(down, up, out, "up")),
             threading.Thread(target=pump_blocking, args=(up, down, out, "down"))]
        for x in t:
            x.start()
        for x in t:
            x.join()
        if len(out) != 2:
            sys.exit("splice_relay: a direction failed")
        moved = (out["up"], out["down"])
    else:
        moved = relay_nonblocking(down, up)
    print(f"splice_relay: OK up={moved[0]} down={moved[1]}", flush=True)


if __name__ == "__main__":
    main()

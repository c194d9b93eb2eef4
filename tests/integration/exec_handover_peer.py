#!/usr/bin/env python3
"""An inetd-style server whose accepted socket is served by a new program,
and its client (for exec-handover.sh).

server --port P [--banner N] [--script DIR] [--seed S]
    Accepts one connection; with --banner, sends N pseudo-random bytes
    (seed S+2) on it first. Then forks a child that makes the socket its
    stdin and stdout (two fds of one socket, as inetd does), closes the
    rest and execs this script's worker; the parent closes its copy at
    once and waits for the child. Exit status: the worker's. With
    --script, the child execs a shell script instead, as a CGI-style
    server does: `head` writes SCRIPT_HEAD bytes (seed S+2) from a file in
    DIR, the shell itself prints SCRIPT_TEXT bytes of text (hex of seed
    S+3) with its printf builtin, then `cat` echoes the rest: three
    programs writing on one socket, each with a shim of its own.
worker
    Echoes stdin to stdout with os.read/os.write until the end of the
    stream, then shuts its sending side down. Prints:
      exec_handover_peer worker: echoed=N
client --port P --bytes N [--banner B] [--script] [--seed S]
    Connects; reads and checks the B banner bytes first (with --script,
    what the script writes before its echo); then sends N
    bytes (seed S) from a thread while reading the echo, half-closes, and
    checks the echo byte for byte and the end of the stream. Prints:
      exec_handover_peer client: echoed=N
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import os
import socket
import sys

from peer_streams import accept_one, expect_same, recv_all, recv_exactly, send_in_background, stream

DEADLINE = 60.0
CHUNK = 256 << 10
SCRIPT_HEAD = 3000
SCRIPT_TEXT = 1000
SCRIPT = 'head -c %d "$1" && printf %%s "$(cat "$2")" && exec cat' % SCRIPT_HEAD


def script_prefix(seed):
    """What --script's programs write before the echo."""
    return stream(seed + 2, SCRIPT_HEAD) + stream(seed + 3, SCRIPT_TEXT // 2).hex().encode()


def server(args):
    s = accept_one(args.port)
    if args.banner:
        s.sendall(stream(args.seed + 2, args.banner))
    argv = [sys.executable, os.path.abspath(__file__), "worker"]
    if args.script:
        head, text = os.path.join(args.script, "head"), os.path.join(args.script, "text")
        with open(head, "wb") as f:
            f.write(stream(args.seed + 2, SCRIPT_HEAD))
        with open(text, "w") as f:
            f.write(stream(args.seed + 3, SCRIPT_TEXT // 2).hex())
        argv = ["/bin/bash", "-c", SCRIPT, "script", head, text]
    pid = os.fork()
    if pid == 0:
        os.dup2(s.fileno(), 0)
        os.dup2(s.fileno(), 1)
        s.close()
        os.execv(argv[0], argv)
    s.close()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def worker(_args):
    echoed = 0
    while True:
        data = os.read(0, CHUNK)
        if not data:
            break
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]
        echoed += len(data)
    socket.socket(fileno=os.dup(1)).shutdown(socket.SHUT_WR)
    print(f"exec_handover_peer worker: echoed={echoed}", file=sys.stderr, flush=True)
    return 0


def client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    banner = script_prefix(args.seed) if args.script else stream(args.seed + 2, args.banner)
    if banner:
        got = recv_exactly(s, len(banner), "exec_handover_peer client")
        expect_same("the banner", got, banner)
    data = stream(args.seed, args.bytes)
    join = send_in_background(s, data)
    echo = recv_all(s)
    join(DEADLINE)
    expect_same("the echo", echo, data)
    s.close()
    print(f"exec_handover_peer client: echoed={len(echo)}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "worker", "client"])
    p.add_argument("--port", type=int)
    p.add_argument("--bytes", type=int, default=0)
    p.add_argument("--banner", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--script", nargs="?", const=True, default=None)
    args = p.parse_args()
    try:
        return {"server": server, "worker": worker, "client": client}[args.role](args)
    except AssertionError as e:
        print(f"exec_handover_peer {args.role}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

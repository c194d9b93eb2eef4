#!/usr/bin/env python3
"""An application that uses TCP urgent data itself (for mixed-oob.sh).

client --port P --seed S --a-bytes NA --b-bytes NB [--sync]
       --sent-normal FILE --sent-inline FILE [--no-urgent]
    Sends A (NA bytes), one urgent byte '!' with MSG_OOB, then B (NB bytes),
    half-closes and reads what the server sends until EOF. A and B are
    pseudo-random from the seed. Without --sync the three sends go back to back
    (the server finds them all queued); with --sync the client waits for the
    server's one-byte ack "k" after A, so that the urgent byte arrives while
    the server's reader sits exactly at the mark. --no-urgent leaves the
    urgent byte out (an application that never uses urgent data, talking to
    a server that reads it inline). Writes A+B to --sent-normal
    and A+'!'+B to --sent-inline: what a server should read in-band with
    SO_OOBINLINE off and on.
server --port P --out FILE [--inline] [--sync --a-bytes NA]
    Accepts one connection. --inline sets SO_OOBINLINE on the listening
    socket before listen(), so the accepted socket inherits it (the way
    telnet-era servers do). Reads everything in-band into --out, the careful
    way an application that uses urgent data must: before each read it asks
    SIOCATMARK, and at the mark (SO_OOBINLINE off) it fetches the urgent byte
    with recv(MSG_OOB) before reading on, since a read that starts at the mark
    would skip the byte and forget it. Without --sync it first waits for the
    client's FIN (POLLRDHUP), so that the whole stream is queued when it
    starts reading. Prints one line:
      oob_peer server: oobinline=I oob=[..] marks=[..] after=E in_band=N
    oob: urgent bytes fetched with recv(MSG_OOB); marks: in-band offsets at
    which SIOCATMARK was 1 before a read; after: what recv(MSG_OOB|MSG_DONTWAIT)
    gives once EOF is reached (an errno name, or the byte).
Exit status: 0 OK, 1 failure (message on stderr).
"""
import argparse
import errno
import fcntl
import random
import select
import socket
import struct
import sys
import time

SIOCATMARK = 0x8905
URGENT = b"!"
ACK = b"k"
DEADLINE = 30.0


def at_mark(s):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), SIOCATMARK, b"\0\0\0\0"))[0] != 0


def payload(seed, na, nb):
    return random.Random(seed).randbytes(na), random.Random(seed + 1).randbytes(nb)


def wait_for(s, events, what):
    p = select.poll()
    p.register(s.fileno(), events)
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        for _, rev in p.poll(100):
            if rev & events:
                return rev
    raise TimeoutError(f"no {what} after {DEADLINE:.0f} s")


def fetch_urgent(s):
    """recv(MSG_OOB) until the byte is there (EAGAIN: pointer seen, byte not
    yet). Returns the byte value, or None when there is no urgent data."""
    end = time.monotonic() + DEADLINE
    while True:
        try:
            b = s.recv(1, socket.MSG_OOB | socket.MSG_DONTWAIT)
            return b[0] if b else None
        except BlockingIOError:
            if time.monotonic() > end:
                raise TimeoutError("urgent byte announced but never arrived")
            time.sleep(0.001)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return None
            raise


def server(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if args.inline:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(1)
    s, _ = ls.accept()
    ls.close()
    inline = s.getsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE)
    data = bytearray()
    oob, marks = [], []

    def read_some(limit):
        if at_mark(s):
            if len(data) not in marks:
                marks.append(len(data))
            if not inline and not oob:
                b = fetch_urgent(s)
                if b is not None:
                    oob.append(b)
        chunk = s.recv(limit)
        data.extend(chunk)
        return len(chunk)

    if args.sync:
        while len(data) < args.a_bytes:
            if read_some(args.a_bytes - len(data)) == 0:
                raise EOFError(f"EOF after {len(data)} of the {args.a_bytes} bytes before the urgent byte")
        s.sendall(ACK)
        # The reader is at the mark-to-be: wait for the urgent byte rather
        # than read blindly across it (which, with SO_OOBINLINE off, would
        # skip the byte and forget it; with it on, the mark would not be seen).
        wait_for(s, select.POLLPRI, "POLLPRI for the urgent byte")
    else:
        wait_for(s, select.POLLRDHUP | select.POLLHUP, "FIN from the client")
    while read_some(65536) > 0:
        pass
    try:
        b = s.recv(1, socket.MSG_OOB | socket.MSG_DONTWAIT)
        after = f"byte:{b[0]:#04x}" if b else "eof"
    except OSError as e:
        after = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"oob_peer server: oobinline={inline} oob={oob} marks={marks} after={after} in_band={len(data)}", flush=True)
    return 0


def client(args):
    a, b = payload(args.seed, args.a_bytes, args.b_bytes)
    with open(args.sent_normal, "wb") as f:
        f.write(a + b)
    with open(args.sent_inline, "wb") as f:
        f.write(a + URGENT + b)
    s = socket.create_connection(("127.0.0.1", args.port), timeout=DEADLINE)
    s.sendall(a)
    got = bytearray()
    if args.sync:
        got += s.recv(1)
        if got != ACK:
            print(f"oob_peer client: expected the ack {ACK!r} after A, got {bytes(got)!r}", file=sys.stderr)
            return 1
    if not args.no_urgent and s.send(URGENT, socket.MSG_OOB) != 1:
        print("oob_peer client: send(MSG_OOB) did not take the byte", file=sys.stderr)
        return 1
    s.sendall(b)
    s.shutdown(socket.SHUT_WR)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    want = ACK if args.sync else b""
    if bytes(got) != want:
        print(f"oob_peer client: server sent {bytes(got)[:32]!r} ({len(got)} bytes), expected {want!r}", file=sys.stderr)
        return 1
    urgent = "no urgent byte" if args.no_urgent else "urgent"
    print(f"oob_peer client: sent {len(a)} + {urgent} + {len(b)} bytes, received {bytes(got)!r}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--a-bytes", type=int, default=20000)
    p.add_argument("--b-bytes", type=int, default=20000)
    p.add_argument("--sync", action="store_true")
    p.add_argument("--inline", action="store_true")
    p.add_argument("--no-urgent", action="store_true")
    p.add_argument("--out")
    p.add_argument("--sent-normal")
    p.add_argument("--sent-inline")
    args = p.parse_args()
    if args.role == "server":
        if not args.out:
            p.error("server needs --out")
        return server(args)
    if not args.sent_normal or not args.sent_inline:
        p.error("client needs --sent-normal and --sent-inline")
    return client(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, EOFError, TimeoutError) as e:
        print(f"oob_peer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

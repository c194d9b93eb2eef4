#!/usr/bin/env python3
"""TCP Fast Open through the shim (tests/integration/fastopen.sh):

  fastopen_peer.py --how connect|sendto [--conns N] [--bytes B]

One process: a listener with TCP_FASTOPEN, and a client that makes N
connections one after the other, each sending B random bytes and reading
the server's verdict. connect: TCP_FASTOPEN_CONNECT, then connect() and
sendall() (curl's --tcp-fastopen); sendto: sendto(MSG_FASTOPEN) on an
unconnected socket, then sendall() of the rest. From the second
connection on the client has the server's cookie and its first bytes
ride in the SYN. The server compares every byte it read with what was
sent. Prints
    fastopen_peer: OK how=HOW conns=N bytes=B
or says which connection differed, and exits 1.
"""
import argparse
import os
import socket
import sys
import threading

MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN = 23
TCP_FASTOPEN_CONNECT = 30


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--how", choices=["connect", "sendto"], required=True)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--bytes", type=int, default=1 << 20)
    a = p.parse_args()
    ls = socket.socket()
    ls.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN, 16)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    ls.settimeout(30)
    port = ls.getsockname()[1]
    sent = [os.urandom(a.bytes) for _ in range(a.conns)]
    verdicts = [None] * a.conns

    def serve():
        for i in range(a.conns):
            c, _ = ls.accept()
            c.settimeout(30)
            got = bytearray()
            while len(got) < a.bytes:
                d = c.recv(1 << 20)
                if not d:
                    break
                got += d
            verdicts[i] = bytes(got) == sent[i]
            c.sendall(b"same" if verdicts[i] else b"diff")
            c.close()

    t = threading.Thread(target=serve)
    t.start()
    for i in range(a.conns):
        s = socket.socket()  # blocking: a timeout would make sendto's connect nonblocking
        if a.how == "connect":
            s.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
            s.connect(("127.0.0.1", port))
            s.sendall(sent[i])
        else:
            n = s.sendto(sent[i][:1000], MSG_FASTOPEN, ("127.0.0.1", port))
            s.sendall(sent[i][n:])
        s.settimeout(30)
        answer = s.recv(4)
        s.close()
        if answer != b"same":
            t.join(30)
            sys.exit(f"fastopen_peer: connection {i} ({a.how}): the server read other bytes than were sent "
                     f"({answer!r}; first bytes read differ: {verdicts[i]})")
    t.join(30)
    print(f"fastopen_peer: OK how={a.how} conns={a.conns} bytes={a.bytes}", flush=True)


if __name__ == "__main__":
    main()

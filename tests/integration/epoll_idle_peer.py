#!/usr/bin/env python3
"""An epoll server whose connections wait idle, and a client, to check
that a waiting server sleeps until something happens (tests/integration/
epoll-idle.sh):

  server --port P --conns N [--talker] [--et]
      One thread, one epoll set: accepts N connections and answers each
      16-byte request on them with a 16-byte response, as many as come;
      exits once all N were accepted and have ended. With --talker, a
      second thread writes TALK bytes (a seeded stream) on the first
      connection, from its first response on, while the epoll thread goes
      on reading that connection's requests: the talker's blocking sends
      read the connection's frames off the socket (the doorbells the
      sleeping epoll wait asked for among them). Those requests get one
      response, after the talk, once they all came. With --et, each
      connection is registered as nginx registers them,
      EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, and read to EAGAIN.
  client --port P --conns N --ready FILE --go FILE [--talker]
      Opens N connections, each sends a request and checks its response;
      creates FILE (ready) and waits for GO (at most 60 s); then each
      connection makes ROUNDS more requests and closes (PAUSE seconds
      after the first of them). With --talker it
      reads (and checks) the server's TALK bytes and the one response on
      the first connection, in a thread, while it sends TALK_ROUNDS
      requests on it, 2 ms apart; the other connections' requests follow.
      With --burst, instead: BURSTS times, IDLE_GAP seconds of quiet, a
      request on the first connection, PAUSE seconds, then every other
      connection sends a request at once and only then are the responses
      read (all of them checked).
  server --port P --room / client --port P --room
      One connection, registered by the server as nginx registers it.
      The client makes one request, waits SETTLE seconds, sends a second
      one, then reads nothing for HOLD seconds. The server answers the
      first with a response, the second with REPLY bytes (a seeded stream) by nonblocking sends until EAGAIN, then waits for
      room in epoll waits of POLL_S seconds each, longer idle than the
      second after which a wait leaves a link to the kernel: the room the
      client's reading makes must wake it. The client checks every byte.

Each end prints one line:
    epoll_idle_peer server: OK conns=N requests=R talked=T
    epoll_idle_peer client: OK conns=N requests=R heard=T
"""
import argparse
import os
import select
import socket
import sys
import threading
import time

from peer_streams import expect_same, recv_exactly, stream

REQ = b"ping" * 4
RESP = b"pong" * 4
ROUNDS = 3
TALK = 32 << 20
TALK_ROUNDS = 200
BURSTS = 3
PAUSE = 0.2
# --et: what nginx registers a connection for
CONN_EVENTS_ET = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET
IDLE_GAP = 1.3   # longer than the second after which a wait leaves an idle link to the kernel
# --room
REPLY = 8 << 20
SETTLE = 1.2     # a link that switched less than a second ago is never left to the kernel
HOLD = 2.5
POLL_S = 0.1


def die(who, msg):
    sys.exit(f"epoll_idle_peer {who}: {msg}")


def server(a):
    ls = socket.create_server(("127.0.0.1", a.port), backlog=1024)
    ls.setblocking(False)
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    conns, pending = {}, {}
    accepted = ended = requests = 0
    talker = talker_sock = None
    talker_reqs = 0
    talked = [0]
    deadline = time.monotonic() + 120
    while accepted < a.conns or ended < accepted:
        left = deadline - time.monotonic()
        if left <= 0:
            die("server", f"timed out: accepted={accepted} ended={ended}")
        for fd, ev in ep.poll(left):
            if fd == ls.fileno():
                while accepted < a.conns:
                    try:
                        s, _ = ls.accept()
                    except BlockingIOError:
                        break
                    s.setblocking(False)
                    conns[s.fileno()] = s
                    pending[s.fileno()] = b""
                    ep.register(s.fileno(), CONN_EVENTS_ET if a.et else select.EPOLLIN)
                    if a.talker and accepted == 0:
                        talker_sock = s
                    accepted += 1
                continue
            s = conns[fd]
            if not ev & select.EPOLLIN:
                continue   # --et: room to write, which it does not wait for
            data = b""
            try:
                # --et: everything there, as an edge says so only once
                while True:
                    got = s.recv(4096)
                    data += got
                    if not got or not a.et:
                        break
            except BlockingIOError:
                if not data:
                    continue
            if not data:
                ep.unregister(fd)
                del conns[fd]
                s.close()
                ended += 1
                continue
            buf = pending[fd] + data
            while len(buf) >= len(REQ):
                if buf[:len(REQ)] != REQ:
                    die("server", f"a request differs: {buf[:len(REQ)]!r}")
                buf = buf[len(REQ):]
                requests += 1
                if talker and s is talker_sock:
                    # Its way back carries the talk, then one response
                    # once all its requests came.
                    talker_reqs += 1
                    if talker_reqs == TALK_ROUNDS:
                        talker.join(120)
                        if talker.is_alive():
                            die("server", "the talker did not finish")
                        s.setblocking(True)
                        s.sendall(RESP)
                        s.setblocking(False)
                    continue
                s.setblocking(True)
                s.sendall(RESP)
                s.setblocking(False)
                if s is talker_sock:
                    talker = threading.Thread(target=talk, args=(s, talked), daemon=True)
                    talker.start()
            pending[fd] = buf
    print(f"epoll_idle_peer server: OK conns={accepted} requests={requests} talked={talked[0]}", flush=True)


def server_room(a):
    ls = socket.create_server(("127.0.0.1", a.port))
    s, _ = ls.accept()
    ls.close()
    s.setblocking(False)
    ep = select.epoll()
    ep.register(s.fileno(), CONN_EVENTS_ET)
    deadline = time.monotonic() + 60
    req, sent, reply, eof, blocked, answered = b"", 0, stream(9, REPLY), False, False, False
    while not eof:
        if time.monotonic() > deadline:
            die("server", f"timed out with {sent} of {REPLY} bytes sent, request {req!r}")
        for _, ev in ep.poll(POLL_S):
            if ev & select.EPOLLOUT:
                blocked = False
            if ev & select.EPOLLIN:
                try:
                    while True:   # edge-triggered: to EAGAIN
                        got = s.recv(4096)
                        if not got:
                            eof = True
                            break
                        req += got
                except BlockingIOError:
                    pass
        if len(req) > 2 * len(REQ) or req != (REQ * 2)[:len(req)]:
            die("server", f"a request differs: {req!r}")
        if len(req) >= len(REQ) and not answered:
            s.setblocking(True)
            s.sendall(RESP)
            s.setblocking(False)
            answered = True
        if len(req) == 2 * len(REQ) and sent < REPLY and not blocked:
            # Until EAGAIN; then only an edge of room says to go on.
            try:
                while sent < REPLY:
                    sent += s.send(reply[sent:sent + (1 << 16)])
            except BlockingIOError:
                blocked = True
    if sent < REPLY:
        die("server", f"the client closed with {sent} of {REPLY} bytes sent")
    s.close()
    print(f"epoll_idle_peer server: OK conns=1 requests=2 talked={sent}", flush=True)


def client_room(a):
    who = "epoll_idle_peer client"
    s = socket.create_connection(("127.0.0.1", a.port))
    ask(s, who)   # its response brings the server's switch: the next request goes into the ring
    with open(a.ready, "w"):
        pass
    time.sleep(SETTLE)
    s.sendall(REQ)
    time.sleep(HOLD)
    got = recv_exactly(s, REPLY, who)
    expect_same("the reply", got, stream(9, REPLY))
    s.close()
    print(f"epoll_idle_peer client: OK conns=1 requests=2 heard={len(got)}", flush=True)


def talk(s, talked):
    """Writes TALK bytes on s with blocking sends of its own (a dup, so
    that the epoll thread's nonblocking mode is not this one's)."""
    t = socket.socket(fileno=os.dup(s.fileno()))
    t.setblocking(True)
    data = stream(7, TALK)
    for i in range(0, TALK, 1 << 16):
        t.sendall(data[i:i + (1 << 16)])
        talked[0] += min(1 << 16, TALK - i)
    t.detach()


def ask(s, who):
    s.sendall(REQ)
    expect_same(who, recv_exactly(s, len(RESP), who), RESP)


def client(a):
    who = "epoll_idle_peer client"
    socks = []
    for _ in range(a.conns):
        s = socket.create_connection(("127.0.0.1", a.port))
        ask(s, who)
        socks.append(s)
    requests = a.conns
    with open(a.ready, "w"):
        pass
    deadline = time.monotonic() + 60
    while not os.path.exists(a.go):
        if time.monotonic() > deadline:
            die("client", "no go after 60 s")
        time.sleep(0.02)
    heard = [0]
    listener = None
    if a.talker:
        # The first connection's requests get one response, after the
        # talk, once they all came: until then nothing else happens, so a
        # server that missed one would wait for good.
        listener = threading.Thread(target=hear, args=(socks[0], heard), daemon=True)
        listener.start()
        for _ in range(TALK_ROUNDS):
            socks[0].sendall(REQ)
            requests += 1
            time.sleep(0.002)
        listener.join(120)
        if listener.is_alive():
            die("client", f"no response after the talk: heard {heard[0]} of {TALK} bytes")
    if a.burst:
        for _ in range(BURSTS):
            # Idle long enough, and then one request and a pause: the
            # server's wait after it arms and leaves the others to the
            # kernel, which the burst then wakes all at once.
            time.sleep(IDLE_GAP)
            ask(socks[0], who)
            time.sleep(PAUSE)
            for s in socks[1:]:
                s.sendall(REQ)
            for s in socks[1:]:
                expect_same(who, recv_exactly(s, len(RESP), who), RESP)
            requests += len(socks)
    else:
        for i, s in enumerate(socks[1:] if a.talker else socks):
            for r in range(ROUNDS):
                ask(s, who)
                requests += 1
                if not a.talker and i == r == 0:
                    # The server's next wait has nothing to do for long:
                    # past any spin, it arms, and leaves the connections
                    # idle since before the window to the kernel.
                    time.sleep(PAUSE)
    for s in socks:
        s.close()
    print(f"epoll_idle_peer client: OK conns={a.conns} requests={requests} heard={heard[0]}", flush=True)


def hear(s, heard):
    """The server's TALK bytes, checked, then its one response."""
    who = "epoll_idle_peer client"
    want = stream(7, TALK)
    got = recv_exactly(s, TALK, who)
    expect_same("the talk", got, want)
    heard[0] = len(got)
    expect_same("the response after the talk", recv_exactly(s, len(RESP), who), RESP)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, required=True)
    p.add_argument("--ready")
    p.add_argument("--go")
    p.add_argument("--talker", action="store_true")
    p.add_argument("--burst", action="store_true")
    p.add_argument("--et", action="store_true")
    p.add_argument("--room", action="store_true")
    a = p.parse_args()
    if a.room:
        server_room(a) if a.role == "server" else client_room(a)
    else:
        server(a) if a.role == "server" else client(a)


if __name__ == "__main__":
    main()

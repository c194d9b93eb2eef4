#!/usr/bin/env python3
"""Both ends of a connection in one process, on 127.0.0.1 (or --host), each case
asserting what plain Linux TCP does (tests/integration/tcp-exact.sh).

    tcp_exact_peer.py CASE --rounds N [--host ADDR]

Each round makes new connections; the ends run as threads, and every round
is bounded: an end still blocked when its bound has passed fails the round
with the call it is blocked in and what TCP does there. Odd rounds use
blocking sockets (a read or write waits in the call), even rounds Python's
socket timeouts (the descriptor non-blocking, waits in poll()); both are
what applications do (oob-signalled, which waits in select(), poll() and
epoll itself, alternates when the urgent byte leaves instead). The cases:

  writer-reset  The reader takes 1 KiB and closes with the writer's bytes
        unread: TCP answers with a reset. The writer, in sends of 64 KiB
        that it never stops making, must get ECONNRESET or EPIPE within
        WRITER_BOUND s of that close.
  data-before-reset  The client sends a 25-byte request and closes
        abortively (SO_LINGER on, 0 s). Once both have arrived, the
        server's reads return the 25 bytes, then ECONNRESET, then the end
        of the stream (b''). Each round twice: after a greeting of the
        server (an upgrade can take place first) and with the request
        first (nothing read before the close: it stays TCP).
  oobinline-hello  A server with SO_OOBINLINE reads "PWD\\r\\n" and nothing
        else: set after accept before the client sends ("inline-before"),
        or once the client's bytes arrived ("inline-after"); a client with
        SO_OOBINLINE reads the server's greeting "220 ready\\r\\n" and
        nothing else ("client-inline"). Each inline reader then gets the
        other end's "AB", urgent "!" (MSG_OOB), "CD" as "AB!CD" with the
        mark (SIOCATMARK) in front of the "!", and every stream ends
        exactly there. The reader reads while the other end sends: a
        sender whose shim switched its direction (R2SOCK_UPGRADE=now)
        sends an urgent byte only once the reader's shim read past its
        switch mark (README, limitations).
  oob-signalled  The server sends one urgent byte right after accept ("!",
        and in turn 0xf4 and "H", values the shim's hellos have): the
        client's select() lists the socket in exceptfds, poll() reports
        POLLPRI, epoll EPOLLPRI, each within OOB_WAIT s, and recv(MSG_OOB)
        returns the byte; the data that follows is read exactly.
  write-after-close  The client sends a line and closes (FIN; nothing of
        the server's unread). The server reads the line and writes one
        byte a millisecond: the first write succeeds (the closed peer
        answers it with a reset), and a later one fails with EPIPE or
        ECONNRESET, at write WRITE_ERROR_BY at the latest.
  buffer-sizes  Buffers the application sized (SO_SNDBUF after connect,
        SO_RCVBUF on the listener, as test_asyncio's sendfile tests do)
        bound what a writer has in flight, after WARMUP bytes each way: a
        nonblocking writer whose reader does not read gets EAGAIN within
        BOTH_MAX bytes with both at BUF ("both"), within SNDBUF_MAX with
        only its own ("sndbuf"), and the reader then reads every byte as
        sent; a blocking writer of CLOSE_DATA bytes whose reader takes 1 KiB
        and closes fails with ECONNRESET or EPIPE ("close"), having had no
        room for them all.
  epoll-after-close  A connection in an epoll set (EPOLLIN|EPOLLRDHUP),
        past WARMUP bytes each way, is closed by the application without
        EPOLL_CTL_DEL (haproxy's way): the kernel drops it from the set. A
        new connection then takes its descriptor number (either end) and
        is added; the old one's peer closes, the new one's stays silent: an
        epoll_wait of AFTER_CLOSE_WAIT s reports nothing ("reuse"; where
        the number differs, the same without the new connection).
  recv-untouched  The server reads at once with recvmsg_into into three
        buffers that hold more than the 22-byte message the client sends a
        moment later (a slice of the middle one), as CPython's
        testRecvmsgIntoScatter does, then the end of the stream with
        recv_into into a larger buffer: plain TCP writes the bytes it
        returns and leaves every other byte of the buffers as it was.
        (With R2SOCK_UPGRADE=now the message comes behind the client's
        switch mark, the first thing the waiting read meets.)
  epoll-add-ready  A keep-alive connection after KEEPALIVE exchanges: the
        client sends the next request, then the server adds the connection
        to an epoll set that another thread already waits on (EPOLL_CTL_ADD
        with EPOLLIN, or EPOLLIN|EPOLLET, or EPOLL_CTL_MOD from no events
        to EPOLLIN), as Apache's mpm_event does. The waiter must wake with
        EPOLLIN for the connection within ADD_WAKE s of that call. Also
        with the request sent only after the call ("add-then-send"): the
        waiter must wake within ADD_WAKE s of the request.

Prints one line, `tcp_exact_peer CASE: OK rounds=N conns=C` (C: the
connections made), or `tcp_exact_peer CASE: FAIL round R of N: ...`
(what plain TCP does, and what was seen) and exits 1.
"""
import argparse
import fcntl
import os
import select
import socket
import struct
import sys
import threading
import time

SIOCATMARK = 0x8905
STEP_BOUND = 5.0       # any one step of a round; TCP takes microseconds
WRITER_BOUND = 10.0    # writer-reset: the writer's error after the close
OOB_WAIT = 5.0         # oob-signalled: select, poll and epoll timeouts
WRITE_ERROR_BY = 5     # write-after-close: TCP fails the 2nd write here
WRITES = 50            # write-after-close: writes made at most
ADD_WAIT = 3.0         # epoll-add-ready: the waiter's timeout
ADD_WAKE = 1.0         # epoll-add-ready: its wake-up after the ADD/MOD
KEEPALIVE = 4          # epoll-add-ready: exchanges before the last request
AFTER_CLOSE_WAIT = 0.5 # epoll-after-close: the wait that must report nothing
HOST = "127.0.0.1"     # --host: where both ends meet (an RDMA device's address in the rxe guest)
BUF = 4096             # buffer-sizes: SO_SNDBUF / SO_RCVBUF asked for
WARMUP = 96 * 1024     # buffer-sizes: bytes each way first (past the default policy's 64 KiB)
CLOSE_DATA = 256 * 1024 + 1  # buffer-sizes: the close variant's writer (test_asyncio's file)
BOTH_MAX = 64 * 1024   # buffer-sizes: in flight at most, both buffers at BUF (plain: 12 KiB seen)
SNDBUF_MAX = 320 * 1024  # ... only the writer's at BUF (plain: 176 KiB seen; a shm ring holds 512 KiB)

REQUEST = b"GET /index.html HTTP/1.0\n"   # 25 bytes
GREETING = b"220 ready\r\n"
COMMAND = b"PWD\r\n"
REPLY = b'257 "/" is the current directory\r\n'


class Mismatch(Exception):
    """What the round saw differs from what plain TCP does."""


class End(threading.Thread):
    """One end of a round: fn(end) on a thread of its own. end.step says
    what it is doing (and what TCP does there) for a bound's message."""

    def __init__(self, name, fn):
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.step = "starting"
        self.error = None

    def run(self):
        try:
            self.fn(self)
        except BaseException as e:  # reported by the round, with the step
            self.error = e


def both(bound, how, **ends):
    """Runs the named ends to completion, all within bound seconds. An end
    that fails ends the round at once (its peer may be left waiting for
    what it would have sent)."""
    threads = [End(name, fn) for name, fn in ends.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + bound
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        if any(t.error is not None for t in threads):
            break
        time.sleep(0.005)
    for t in threads:
        if isinstance(t.error, Mismatch):
            raise Mismatch(f"{t.name}: {t.error}")
        if isinstance(t.error, TimeoutError):
            raise Mismatch(f"{t.name}: {with_plain(t.step)}; seen it wait {STEP_BOUND:g} s (socket timeout) ({how})")
        if t.error is not None:
            raise Mismatch(f"{t.name}: unexpected {type(t.error).__name__}: {t.error} ({how}; {t.step})")
    for t in threads:
        if t.is_alive():
            others = "; ".join(f"the {o.name} {'is at: ' + o.step if o.is_alive() else 'is done'}"
                               for o in threads if o is not t)
            raise Mismatch(f"{t.name}: {with_plain(t.step)}; seen it still blocked after {bound:g} s ({how});"
                           f" {others}")


def with_plain(step):
    """A step, with what TCP does there when it does not say it itself:
    every step of these rounds completes at once on TCP (its peer has sent
    what it waits for)."""
    return step if "plain TCP" in step else f"{step} (plain TCP: completes at once)"


def wait(event, what):
    if not event.wait(STEP_BOUND):
        raise Mismatch(f"{what} did not happen within {STEP_BOUND:g} s")


class Listener:
    def __init__(self):
        self.ls = socket.socket()
        self.ls.bind((HOST, 0))
        self.ls.listen(16)
        self.ls.settimeout(STEP_BOUND)
        self.port = self.ls.getsockname()[1]
        self.conns = 0

    def pair_fns(self, blocking):
        """accept() and connect() for one connection, in the round's mode."""
        def accept():
            s, _ = self.ls.accept()
            s.settimeout(None if blocking else STEP_BOUND)
            return s

        def connect():
            c = socket.create_connection((HOST, self.port), timeout=STEP_BOUND)
            c.settimeout(None if blocking else STEP_BOUND)
            self.conns += 1
            return c
        return accept, connect


def mode_name(blocking):
    return "blocking sockets" if blocking else "socket timeouts"


def read_upto(s, n):
    """Reads until n bytes or more came, or the end of the stream."""
    got = bytearray()
    while len(got) < n:
        d = s.recv(256)
        if not d:
            break
        got += d
    return bytes(got)


def read_to_eof(s):
    got = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            return bytes(got)
        got += d


def atmark(s):
    return struct.unpack("i", fcntl.ioctl(s.fileno(), SIOCATMARK, b"\0\0\0\0"))[0] != 0


def read_inline(s):
    """A SO_OOBINLINE reader's view, a byte a read: the bytes up to the end
    of the stream and the offsets at which SIOCATMARK was 1."""
    got = bytearray()
    marks = []
    while True:
        # The mark is asked once the next byte (or the end) is there: asked
        # before, it would say 0 for an urgent byte still on its way.
        if not select.select([s], [], [], STEP_BOUND)[0]:
            raise Mismatch(f"nothing more to read in {STEP_BOUND:g} s after {bytes(got)!r} (plain TCP: b'AB!CD',"
                           " then the end)")
        if atmark(s):
            marks.append(len(got))
        d = s.recv(1)
        if not d:
            return bytes(got), marks
        got += d


def send_urgent_sandwich(s):
    """Sends "AB", the urgent "!" and "CD", in three calls."""
    s.sendall(b"AB")
    if s.send(b"!", socket.MSG_OOB) != 1:
        raise Mismatch("send(MSG_OOB) did not take the urgent byte")
    s.sendall(b"CD")


def expect_sandwich(who, s):
    got, marks = read_inline(s)
    if got != b"AB!CD" or marks != [2]:
        raise Mismatch(f"with SO_OOBINLINE, plain TCP gives the {who} b'AB!CD' with SIOCATMARK=1 only at offset 2"
                       f" (in front of the urgent '!'); seen {got!r}, SIOCATMARK=1 at offsets {marks}")


# ---- writer-reset --------------------------------------------------------

def writer_reset(rnd, lst):
    blocking = rnd % 2 == 1
    how = mode_name(blocking)
    accept, connect = lst.pair_fns(blocking)
    closed = threading.Event()
    state = {}
    plain = ("plain TCP fails the writer's send with ECONNRESET or EPIPE within milliseconds once the reader"
             " closed with unread bytes (the close sends a reset)")

    def server(e):
        e.step = "accept"
        s = accept()
        e.step = "reading the first 1 KiB of the client's bytes"
        got = 0
        while got < 1024:
            d = s.recv(1024 - got)
            if not d:
                raise Mismatch(f"end of stream after {got} of the client's bytes ({how})")
            got += len(d)
        # More of the client's bytes arrive meanwhile: unread at the close.
        time.sleep(0.1)
        e.step = "close"
        s.close()
        state["closed_at"] = time.monotonic()
        closed.set()

    def client(e):
        e.step = "connect"
        c = connect()
        chunk = b"w" * 65536
        sent = 0
        try:
            while True:
                e.step = f"send, after {sent} bytes ({plain})"
                c.sendall(chunk)
                sent += len(chunk)
                if closed.is_set() and time.monotonic() - state["closed_at"] > WRITER_BOUND:
                    raise Mismatch(f"{plain}; seen {sent} bytes sent without an error, the last {WRITER_BOUND:g} s"
                                   f" after that close ({how})")
        except (ConnectionResetError, BrokenPipeError) as err:
            state["failed_at"] = time.monotonic()
            state["error"] = err.errno
            state["sent"] = sent
        except socket.timeout:
            raise Mismatch(f"{plain}; seen send() wait for room for {STEP_BOUND:g} s ({sent} bytes sent,"
                           f" {how})") from None
        c.close()

    # The writer's bound counts from the reader's close.
    ends = [End("server", server), End("client", client)]
    for t in ends:
        t.start()
    deadline = time.monotonic() + STEP_BOUND + 1
    while time.monotonic() < deadline:
        if any(t.error is not None for t in ends) or closed.is_set():
            break
        time.sleep(0.005)
    if closed.is_set():
        ends[1].join(max(0.0, state["closed_at"] + WRITER_BOUND - time.monotonic()))
    for t in ends:
        if isinstance(t.error, Mismatch):
            raise Mismatch(f"{t.name}: {t.error}")
        if t.error is not None:
            raise Mismatch(f"{t.name}: unexpected {type(t.error).__name__}: {t.error} ({how}; {t.step})")
    if not closed.is_set():
        raise Mismatch(f"the server did not read 1 KiB and close within {STEP_BOUND + 1:g} s ({how}):"
                       f" {ends[0].step}")
    if ends[1].is_alive():
        raise Mismatch(f"client: {plain}; seen the writer still blocked {WRITER_BOUND:g} s after that close"
                       f" ({how}), in: {ends[1].step.split(' (')[0]}")
    took = state["failed_at"] - state["closed_at"]
    return f"{os.strerror(state['error'])} after {state['sent']} bytes, {took * 1000:.0f} ms after the close ({how})"


# ---- data-before-reset ---------------------------------------------------

def data_before_reset(rnd, lst):
    out = []
    for greeting in (True, False):
        out.append(data_before_reset_one(rnd, lst, greeting))
    return "; ".join(out)


def data_before_reset_one(rnd, lst, greeting):
    blocking = rnd % 2 == 1
    accept, connect = lst.pair_fns(blocking)
    closed = threading.Event()
    how = ("after the server's greeting" if greeting else "with the request first") + ", " + mode_name(blocking)

    def server(e):
        e.step = "accept"
        s = accept()
        if greeting:
            e.step = "sending the greeting"
            s.sendall(GREETING)
        e.step = "waiting for the client's abortive close"
        wait(closed, "the client's close")
        time.sleep(0.2)  # the request and the reset are both in by now
        e.step = "1st read (plain TCP returns the 25 request bytes at once)"
        first = s.recv(1024)
        if first != REQUEST:
            raise Mismatch(f"plain TCP returns the 25 request bytes, then ECONNRESET, then b'' ({how});"
                           f" seen a 1st read of {first!r}")
        e.step = "2nd read (plain TCP fails it with ECONNRESET at once)"
        try:
            second = s.recv(1024)
        except ConnectionResetError:
            second = "ECONNRESET"
        except socket.timeout:
            second = f"a wait of {STEP_BOUND:g} s (timeout)"
        if second != "ECONNRESET":
            raise Mismatch(f"plain TCP returns the 25 request bytes, then ECONNRESET, then b'' ({how});"
                           f" seen the 25 bytes, then {second!r}")
        e.step = "3rd read (plain TCP returns the end of the stream at once)"
        try:
            third = s.recv(1024)
        except ConnectionResetError:
            third = "ECONNRESET again"
        except OSError as err:
            third = f"{type(err).__name__}: {err}"
        if third != b"":
            raise Mismatch(f"plain TCP returns the 25 request bytes, then ECONNRESET, then b'' ({how});"
                           f" seen the 25 bytes, ECONNRESET, then {third if isinstance(third, str) else repr(third)}")
        s.close()

    def client(e):
        e.step = "connect"
        c = connect()
        if greeting:
            e.step = "reading the greeting (plain TCP: b'220 ready\\r\\n')"
            got = read_upto(c, len(GREETING))
            if got != GREETING:
                raise Mismatch(f"plain TCP gives the client the greeting {GREETING!r}; seen {got!r}")
        e.step = "sending the request"
        c.sendall(REQUEST)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        e.step = "abortive close"
        c.close()
        closed.set()

    both(3 * STEP_BOUND, how, server=server, client=client)
    return ("greeting" if greeting else "request-first") + ": 25 bytes, ECONNRESET, b''"


# ---- oobinline-hello -----------------------------------------------------

def oobinline_hello(rnd, lst):
    return "; ".join(oobinline_one(rnd, lst, v) for v in ("inline-before", "inline-after", "client-inline"))


def oobinline_one(rnd, lst, variant):
    blocking = rnd % 2 == 1
    accept, connect = lst.pair_fns(blocking)
    inline_set = threading.Event()
    sent = threading.Event()
    done = threading.Event()
    how = f"{variant}, {mode_name(blocking)}"

    def set_inline(s):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE) == 0:
            raise Mismatch("SO_OOBINLINE set to 1 reads back as 0")

    def server(e):
        e.step = "accept"
        s = accept()
        if variant == "inline-before":
            set_inline(s)
            inline_set.set()
        elif variant == "inline-after":
            e.step = "waiting until the client's command has arrived"
            wait(sent, "the client's send")
            if not select.select([s], [], [], STEP_BOUND)[0]:
                raise Mismatch(f"the client's command did not make the socket readable in {STEP_BOUND:g} s ({how})")
            time.sleep(0.05)
            set_inline(s)
        else:
            if rnd % 2 == 1:
                wait(inline_set, "the client's SO_OOBINLINE")
            e.step = "sending the greeting"
            s.sendall(GREETING)
        e.step = "reading the command (plain TCP: b'PWD\\r\\n')"
        got = read_upto(s, len(COMMAND))
        if got != COMMAND:
            raise Mismatch(f"plain TCP gives the server the command {COMMAND!r} and no other byte ({how});"
                           f" seen {got!r}")
        if variant == "client-inline":
            e.step = "sending AB, urgent '!', CD"
            send_urgent_sandwich(s)
            s.shutdown(socket.SHUT_WR)
            done.set()
            e.step = "reading to the end of the stream (plain TCP: nothing more)"
            rest = read_to_eof(s)
            if rest:
                raise Mismatch(f"plain TCP ends the client's stream after its command ({how}); seen {rest!r} more")
        else:
            e.step = "sending the reply"
            s.sendall(REPLY)
            # Read while the client sends (see the client-inline variant).
            e.step = "reading AB!CD inline (plain TCP: b'AB!CD', then the end)"
            expect_sandwich(f"server ({how})", s)
        s.close()

    def client(e):
        e.step = "connect"
        c = connect()
        if variant == "client-inline":
            set_inline(c)
            inline_set.set()
            e.step = "reading the greeting (plain TCP: b'220 ready\\r\\n')"
            got = read_upto(c, len(GREETING))
            if got != GREETING:
                raise Mismatch(f"plain TCP gives a SO_OOBINLINE client the greeting {GREETING!r} and no other"
                               f" byte ({how}); seen {got!r}")
            e.step = "sending the command"
            c.sendall(COMMAND)
            # Read while the server sends: its shim may have switched its
            # direction (R2SOCK_UPGRADE=now), and then its urgent byte waits
            # until ours has read past the switch mark (README, limitations).
            e.step = "reading AB!CD inline (plain TCP: b'AB!CD', then the end)"
            expect_sandwich(f"client ({how})", c)
        else:
            if variant == "inline-before":
                wait(inline_set, "the server's SO_OOBINLINE")
            e.step = "sending the command"
            c.sendall(COMMAND)
            sent.set()
            e.step = "reading the reply (plain TCP: the server's reply, then nothing until the end)"
            got = read_upto(c, len(REPLY))
            if got != REPLY:
                raise Mismatch(f"plain TCP gives the client the reply {REPLY!r} ({how}); seen {got!r}")
            e.step = "sending AB, urgent '!', CD"
            send_urgent_sandwich(c)
            c.shutdown(socket.SHUT_WR)
            done.set()
            e.step = "reading to the end of the stream (plain TCP: nothing more)"
            rest = read_to_eof(c)
            if rest:
                raise Mismatch(f"plain TCP ends the server's stream after its reply ({how}); seen {rest!r} more")
        c.close()

    both(4 * STEP_BOUND, how, server=server, client=client)
    return variant


# ---- oob-signalled -------------------------------------------------------

def oob_signalled(rnd, lst):
    accept, connect = lst.pair_fns(True)
    waiting = threading.Event()
    got_oob = threading.Event()
    # Odd rounds: the byte leaves right after accept; even ones once the
    # client waits in select().
    late = rnd % 2 == 0
    # The urgent byte: also of the values the shim's own urgent bytes have
    # (0xf4 as a sized hello's, what CPython's asyncore test sends; 'H' as
    # the plain hello's): an application's byte is reported all the same.
    urgent = (b"!", b"\xf4", b"H")[(rnd // 2) % 3]
    how = ("client already waiting" if late else "sent right after accept") + f", urgent {urgent!r}"

    def server(e):
        e.step = "accept"
        s = accept()
        if late:
            wait(waiting, "the client's wait")
            time.sleep(0.1)
        e.step = "send(MSG_OOB)"
        if s.send(urgent, socket.MSG_OOB) != 1:
            raise Mismatch("send(MSG_OOB) did not take the byte")
        wait(got_oob, "the client's recv(MSG_OOB)")
        e.step = "sending the data that follows"
        s.sendall(b"data")
        s.close()

    def client(e):
        e.step = "connect"
        c = connect()
        waiting.set()
        e.step = "select() on exceptfds (plain TCP: returns at once with the socket listed)"
        _, _, x = select.select([], [], [c], OOB_WAIT)
        if c not in x:
            raise Mismatch(f"plain TCP lists the socket in select()'s exceptfds for the urgent byte ({how});"
                           f" seen none within {OOB_WAIT:g} s")
        e.step = "poll(POLLPRI) (plain TCP: POLLPRI at once)"
        p = select.poll()
        p.register(c, select.POLLPRI)
        ev = p.poll(OOB_WAIT * 1000)
        if not ev or not ev[0][1] & select.POLLPRI:
            raise Mismatch(f"plain TCP reports POLLPRI for the urgent byte ({how}); seen {ev!r} within {OOB_WAIT:g} s")
        e.step = "epoll_wait for EPOLLPRI (plain TCP: EPOLLPRI at once)"
        ep = select.epoll()
        try:
            ep.register(c, select.EPOLLPRI)
            ev = ep.poll(OOB_WAIT)
        finally:
            ep.close()
        if not ev or not ev[0][1] & select.EPOLLPRI:
            raise Mismatch(f"plain TCP reports EPOLLPRI for the urgent byte ({how}); seen {ev!r} within {OOB_WAIT:g} s")
        e.step = f"recv(MSG_OOB) (plain TCP: returns {urgent!r})"
        try:
            b = c.recv(1, socket.MSG_OOB)
        except OSError as err:
            b = f"{type(err).__name__}: {err}"
        if b != urgent:
            raise Mismatch(f"plain TCP's recv(MSG_OOB) returns the urgent {urgent!r} ({how}); seen {b!r}")
        got_oob.set()
        e.step = "reading the data that follows (plain TCP: b'data', then the end)"
        c.settimeout(STEP_BOUND)
        rest = read_to_eof(c)
        if rest != b"data":
            raise Mismatch(f"plain TCP gives the client b'data' after the urgent byte, then the end ({how});"
                           f" seen {rest!r}")
        c.close()

    both(3 * OOB_WAIT + 2 * STEP_BOUND, how, server=server, client=client)
    return how


# ---- write-after-close ---------------------------------------------------

def write_after_close(rnd, lst):
    blocking = rnd % 2 == 1
    accept, connect = lst.pair_fns(blocking)
    closed = threading.Event()
    line_read = threading.Event()
    # Odd rounds: the server reads the line before the client closes; even
    # ones after.
    read_first = rnd % 2 == 1
    how = ("line read before the close" if read_first else "line read after the close") + ", " + mode_name(blocking)
    result = {}

    def server(e):
        e.step = "accept"
        s = accept()
        if not read_first:
            wait(closed, "the client's close")
        e.step = "reading the line"
        got = read_upto(s, len(REQUEST))
        if got != REQUEST:
            raise Mismatch(f"plain TCP gives the server the line {REQUEST!r}; seen {got!r}")
        line_read.set()
        wait(closed, "the client's close")
        time.sleep(0.05)  # its FIN is in
        start = time.monotonic()
        for k in range(1, WRITES + 1):
            e.step = f"write {k} of 1 byte (plain TCP fails the 2nd with EPIPE or ECONNRESET)"
            try:
                s.send(b"x")
            except (BrokenPipeError, ConnectionResetError) as err:
                result["error_at"] = k
                result["errno"] = err.errno
                break
            time.sleep(0.001)
        s.close()
        ms = (time.monotonic() - start) * 1000
        k = result.get("error_at")
        if k is None:
            raise Mismatch(f"plain TCP: the first write after the peer's close succeeds, the closed peer answers it"
                           f" with a reset, and the 2nd write fails with EPIPE or ECONNRESET (by write"
                           f" {WRITE_ERROR_BY} at the latest here); seen all {WRITES} writes succeed, over {ms:.0f} ms"
                           f" ({how})")
        if k == 1:
            raise Mismatch(f"plain TCP: the first write after the peer's orderly close succeeds; seen it fail with"
                           f" {os.strerror(result['errno'])} ({how})")
        if k > WRITE_ERROR_BY:
            raise Mismatch(f"plain TCP fails the 2nd write after the peer's close with EPIPE or ECONNRESET (by write"
                           f" {WRITE_ERROR_BY} at the latest here); seen the error only at write {k} ({how})")

    def client(e):
        e.step = "connect"
        c = connect()
        e.step = "sending the line"
        c.sendall(REQUEST)
        if read_first:
            wait(line_read, "the server's read")
        e.step = "close"
        c.close()
        closed.set()

    both(3 * STEP_BOUND, how, server=server, client=client)
    return f"{os.strerror(result['errno'])} at write {result['error_at']}"


# ---- recv-untouched ------------------------------------------------------

MESSAGE = b"Mary had a little lamb"   # 22 bytes


def filled(bufs, data):
    """The buffers (bytes, start, end) as a read of data into them leaves
    them: data from the first on, every other byte as it was."""
    out = []
    for b, lo, hi in bufs:
        take = data[:hi - lo]
        data = data[len(take):]
        out.append(b[:lo] + take + b[lo + len(take):])
    return out


def recv_untouched(rnd, lst):
    blocking = rnd % 2 == 1
    accept, connect = lst.pair_fns(blocking)
    reading = threading.Event()
    how = mode_name(blocking)

    def server(e):
        e.step = "accept"
        s = accept()
        b1, b2, b3 = bytearray(b"----"), bytearray(b"0123456789"), bytearray(b"-" * 32)
        before = [bytes(b1), bytes(b2), bytes(b3)]
        e.step = "recvmsg_into three buffers larger than the message"
        reading.set()
        n, _, _, _ = s.recvmsg_into([b1, memoryview(b2)[2:9], b3])
        want = filled([(before[0], 0, 4), (before[1], 2, 9), (before[2], 0, 32)], MESSAGE[:n])
        if n == 0 or [bytes(b1), bytes(b2), bytes(b3)] != want:
            raise Mismatch(f"plain TCP writes the {n} bytes a read returns and no other: expected buffers {want!r},"
                           f" seen {[bytes(b1), bytes(b2), bytes(b3)]!r} ({how})")
        e.step = "reading the rest of the message"
        rest = read_upto(s, len(MESSAGE) - n)
        if MESSAGE[:n] + rest != MESSAGE:
            raise Mismatch(f"plain TCP gives the server {MESSAGE!r}; seen {MESSAGE[:n] + rest!r} ({how})")
        big = bytearray(b"=" * 64)
        e.step = "recv_into a buffer at the end of the stream (plain TCP: 0, the buffer as it was)"
        k = s.recv_into(big)
        if k != 0 or bytes(big) != b"=" * 64:
            raise Mismatch(f"plain TCP returns 0 at the end of the stream and writes nothing; seen {k},"
                           f" {bytes(big)!r} ({how})")
        s.close()

    def client(e):
        e.step = "connect"
        c = connect()
        wait(reading, "the server's read")
        time.sleep(0.1)  # it waits inside the call
        e.step = "sending the message"
        c.sendall(MESSAGE)
        c.shutdown(socket.SHUT_WR)
        e.step = "reading the server's end of the stream"
        read_to_eof(c)
        c.close()

    both(3 * STEP_BOUND, how, server=server, client=client)
    return how


# ---- epoll-add-ready -----------------------------------------------------

def epoll_add_ready(rnd, lst):
    return "; ".join(epoll_add_one(rnd, lst, v) for v in ("add", "add-et", "mod", "add-then-send"))


def epoll_add_one(rnd, lst, variant):
    blocking = rnd % 2 == 1
    accept, connect = lst.pair_fns(blocking)
    ep = select.epoll()
    idle_r, idle_w = os.pipe()  # in the set and never ready: the wait is real
    ep.register(idle_r, select.EPOLLIN)
    sent = threading.Event()
    waiting = threading.Event()
    seen = {}
    how = {"add": "EPOLL_CTL_ADD EPOLLIN", "add-et": "EPOLL_CTL_ADD EPOLLIN|EPOLLET",
           "mod": "EPOLL_CTL_MOD from no events to EPOLLIN",
           "add-then-send": "EPOLL_CTL_ADD EPOLLIN, the request sent after it"}[variant] + ", " + mode_name(blocking)
    # add-then-send: the connection is added while the waiter waits, and the
    # client sends its request only then (Apache's keep-alive: the worker
    # re-adds the connection before the client's next request comes).
    late = variant == "add-then-send"
    added_ev = threading.Event()
    answer = b"r" * 32768
    conn = {}

    def waiter(e):
        waiting.set()
        e.step = f"epoll_wait ({ADD_WAIT:g} s timeout)"
        t0 = time.monotonic()
        seen["events"] = ep.poll(ADD_WAIT)
        seen["woke"] = time.monotonic()
        seen["waited"] = seen["woke"] - t0

    def worker(e):
        e.step = "accept"
        s = accept()
        conn["s"] = s
        if variant == "mod":
            ep.register(s, 0)
        for i in range(KEEPALIVE):
            e.step = f"reading request {i + 1}"
            got = read_upto(s, len(REQUEST))
            if got != REQUEST:
                raise Mismatch(f"plain TCP gives request {i + 1} as sent ({how}); seen {got!r}")
            e.step = f"sending answer {i + 1}"
            s.sendall(answer)
        if not late:
            wait(sent, "the client's last request")
        w = End("waiter", waiter)
        seen["thread"] = w
        w.start()
        wait(waiting, "the waiter's start")
        time.sleep(0.1)  # the waiter is inside epoll_wait
        e.step = f"epoll_ctl ({how})"
        seen["added"] = time.monotonic()
        if variant == "mod":
            ep.modify(s, select.EPOLLIN)
        elif variant == "add-et":
            ep.register(s, select.EPOLLIN | select.EPOLLET)
        else:
            ep.register(s, select.EPOLLIN)
        if late:
            time.sleep(0.1)  # the waiter went on waiting
            seen["added"] = time.monotonic()  # the bound runs from the request
            added_ev.set()
        w.join(ADD_WAIT + 1)
        if w.is_alive():
            raise Mismatch(f"plain TCP wakes a thread waiting in epoll_wait with EPOLLIN at once when a connection with"
                           f" unread bytes is added ({how}); the waiter is still in epoll_wait {ADD_WAIT + 1:g} s"
                           f" after the call (its timeout {ADD_WAIT:g} s)")
        if w.error is not None:
            raise Mismatch(f"the waiter: {type(w.error).__name__}: {w.error}")
        e.step = "reading the last request"
        got = read_upto(s, len(REQUEST))
        if got != REQUEST:
            raise Mismatch(f"plain TCP gives the last request as sent ({how}); seen {got!r}")

    def client(e):
        e.step = "connect"
        c = connect()
        for i in range(KEEPALIVE):
            e.step = f"sending request {i + 1}"
            c.sendall(REQUEST)
            e.step = f"reading answer {i + 1}"
            got = read_upto(c, len(answer))
            if got != answer:
                raise Mismatch(f"plain TCP gives answer {i + 1} as sent ({how}); seen {len(got)} bytes"
                               f" differing from the {len(answer)} sent")
        if late:
            wait(added_ev, "the worker's epoll_ctl")
        e.step = "sending the last request"
        c.sendall(REQUEST)
        sent.set()
        conn["c"] = c

    try:
        both(4 * STEP_BOUND + ADD_WAIT, how, worker=worker, client=client)
        fd = conn["s"].fileno()
        after = seen["woke"] - seen["added"]
        evs = dict(seen["events"])
        if not evs.get(fd, 0) & select.EPOLLIN or after > ADD_WAKE:
            raise Mismatch(f"plain TCP wakes a thread already waiting in epoll_wait at once with EPOLLIN for a"
                           f" connection whose request is in when it is added ({how}); seen the wait end"
                           f" {after * 1000:.0f} ms after the call (bound {ADD_WAKE * 1000:.0f} ms, timeout"
                           f" {ADD_WAIT * 1000:.0f} ms) with {seen['events']!r} (connection fd {fd})")
        return f"{variant} {after * 1000:.1f} ms"
    finally:
        ep.close()
        os.close(idle_r)
        os.close(idle_w)
        for k in ("s", "c"):
            if k in conn:
                conn[k].close()

# ---- buffer-sizes --------------------------------------------------------

PATTERN = bytes(i % 251 for i in range(1 << 20))


def pattern(off, n):
    """n bytes of the stream at offset off (a period of 251: a byte lost,
    doubled or moved shows)."""
    off %= 251
    return PATTERN[off:off + n]


def warm_pair(accept, connect, how, sndbuf=0):
    """A connection past WARMUP bytes each way (so past the default
    policy's switch), its client's SO_SNDBUF set after connect if sndbuf:
    (server end, client end)."""
    conn = {}

    def server(e):
        e.step = "accept"
        s = accept()
        conn["s"] = s
        e.step = f"reading the client's {WARMUP} bytes"
        if read_upto(s, WARMUP) != pattern(0, WARMUP):
            raise Mismatch(f"plain TCP gives the client's {WARMUP} bytes as sent ({how})")
        e.step = f"sending {WARMUP} bytes"
        s.sendall(pattern(0, WARMUP))

    def client(e):
        e.step = "connect"
        c = connect()
        conn["c"] = c
        if sndbuf:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        e.step = f"sending {WARMUP} bytes"
        c.sendall(pattern(0, WARMUP))
        e.step = f"reading the server's {WARMUP} bytes"
        if read_upto(c, WARMUP) != pattern(0, WARMUP):
            raise Mismatch(f"plain TCP gives the server's {WARMUP} bytes as sent ({how})")

    try:
        both(4 * STEP_BOUND, how, server=server, client=client)
    except BaseException:
        for k in ("s", "c"):
            if k in conn:
                conn[k].close()
        raise
    return conn["s"], conn["c"]


def buffer_sizes(rnd, lst):
    return "; ".join(buffer_one(rnd, lst, v) for v in ("both", "sndbuf", "close"))


def buffer_one(rnd, lst, variant):
    blocking = rnd % 2 == 1
    how = f"{variant}, {mode_name(blocking)}"
    own = Listener()
    if variant != "sndbuf":
        own.ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
    accept, connect = own.pair_fns(blocking)
    s = c = None
    try:
        s, c = warm_pair(accept, connect, how, sndbuf=BUF)
        lst.conns += 1
        if variant == "close":
            return buffer_close(s, c, how, blocking)
        return buffer_in_flight(s, c, how, BOTH_MAX if variant == "both" else SNDBUF_MAX)
    finally:
        for k in (s, c):
            if k is not None:
                k.close()
        own.ls.close()


def buffer_in_flight(s, c, how, most):
    """A nonblocking writer, its reader not reading: bytes until EAGAIN, and
    still so after three looks a fifth of a second apart (TCP's ACKs may
    free room a little later). Then the reader reads them all."""
    c.setblocking(False)
    sent, still = WARMUP, 0
    plain = f"plain TCP takes at most {most} bytes with these buffers before the writer gets EAGAIN"
    while still < 3:
        try:
            n = c.send(pattern(sent, 65536))
            sent += n
            still = 0
        except BlockingIOError:
            still += 1
            select.select([], [c], [], 0.2)
        if sent - WARMUP > most:
            raise Mismatch(f"{plain} ({how}); seen {sent - WARMUP} bytes taken")
    flight = sent - WARMUP
    s.settimeout(STEP_BOUND)
    got = read_upto(s, flight)
    if got != pattern(WARMUP, flight):
        raise Mismatch(f"plain TCP gives the reader the {flight} bytes the writer had in flight ({how}); seen"
                       f" {len(got)} bytes that differ")
    return f"{how.split(',')[0]} {flight} bytes in flight"


def buffer_close(s, c, how, blocking):
    """The reader takes 1 KiB and closes with the rest unread: the writer,
    blocked for room, fails (as test_asyncio's
    test_sendfile_close_peer_in_the_middle_of_receiving expects)."""
    plain = (f"plain TCP has no room for {CLOSE_DATA} bytes with buffers of {BUF}: the writer blocks until the"
             " reader closes, then fails with ECONNRESET or EPIPE")
    state = {}

    def reader(e):
        e.step = "reading 1 KiB"
        got = read_upto(s, 1024)
        if got[:1024] != pattern(WARMUP, 1024)[:len(got[:1024])] or len(got) < 1024:
            raise Mismatch(f"plain TCP gives the reader the writer's next bytes as sent ({how}); seen {len(got)}")
        time.sleep(0.1)
        e.step = "close"
        s.close()

    def writer(e):
        e.step = f"sendall of {CLOSE_DATA} bytes ({plain})"
        try:
            c.sendall(pattern(WARMUP, CLOSE_DATA))
        except (ConnectionResetError, BrokenPipeError) as err:
            state["error"] = err.errno
            return
        raise Mismatch(f"{plain} ({how}); seen sendall() of all {CLOSE_DATA} bytes succeed")

    both(2 * STEP_BOUND + WRITER_BOUND, how, reader=reader, writer=writer)
    return f"close {os.strerror(state['error'])}"


# ---- epoll-after-close ---------------------------------------------------

def epoll_after_close(rnd, lst):
    blocking = rnd % 2 == 1
    how = mode_name(blocking)
    accept, connect = lst.pair_fns(blocking)
    ep = select.epoll()
    socks = []
    try:
        s, c = warm_pair(accept, connect, how)
        socks += [s, c]
        old = s.fileno()
        ep.register(old, select.EPOLLIN | select.EPOLLRDHUP)
        s.close()
        s2, c2 = warm_pair(accept, connect, how)
        socks += [s2, c2]
        reuse = old in (s2.fileno(), c2.fileno())
        if reuse:
            ep.register(old, select.EPOLLIN | select.EPOLLRDHUP)
        c.close()  # the old connection's peer: its FIN (or reset) reaches a closed socket
        got = ep.poll(AFTER_CLOSE_WAIT)
        if got:
            what = (f"the new connection on the same descriptor {old}, whose peer sent nothing" if reuse
                    else f"a connection closed by the application (descriptor {old})")
            raise Mismatch(f"plain TCP drops a closed socket from its epoll sets, so epoll_wait reports nothing"
                           f" for {what} ({how}); seen {got!r}")
        return "reuse" if reuse else "closed"
    finally:
        ep.close()
        for k in socks:
            k.close()


CASES = {
    "writer-reset": writer_reset,
    "data-before-reset": data_before_reset,
    "oobinline-hello": oobinline_hello,
    "oob-signalled": oob_signalled,
    "write-after-close": write_after_close,
    "epoll-add-ready": epoll_add_ready,
    "buffer-sizes": buffer_sizes,
    "epoll-after-close": epoll_after_close,
    "recv-untouched": recv_untouched,
}


def main():
    global HOST
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--host", default=HOST)
    a = ap.parse_args()
    HOST = a.host
    fn = CASES[a.case]
    lst = Listener()
    for rnd in range(1, a.rounds + 1):
        try:
            what = fn(rnd, lst)
        except Mismatch as m:
            print(f"tcp_exact_peer {a.case}: FAIL round {rnd} of {a.rounds}: {m}", flush=True)
            # An end may still be blocked inside a call: leave at once.
            os._exit(1)
        print(f"tcp_exact_peer {a.case}: round {rnd}: {what}", flush=True)
    lst.ls.close()
    print(f"tcp_exact_peer {a.case}: OK rounds={a.rounds} conns={lst.conns}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

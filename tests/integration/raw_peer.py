#!/usr/bin/env python3
"""Calls the shim sees only through libc's syscall(), and sockets passed
between processes (tests/integration/raw-calls.sh):

  raw_peer.py close|io|io_uring|handoff|handoff-raw [--bytes B]

close: a server accepts a connection before the client's hello can have
  come (the client finishes its nonblocking connect afterwards), then
  closes it with syscall(SYS_close) without reading, as libuv does. The
  client must read the end of the stream (not a reset), and a pipe made
  then, which takes the closed number, must carry its bytes as a pipe.
io: a byte each way, then B random bytes each way at once on one
  connection, every read and write by syscall(SYS_read) and
  syscall(SYS_write); both sides compare.
io_uring: syscall(SYS_io_uring_setup); prints what it returned.
handoff, handoff-raw: a parent accepts a connection and passes it to a
  worker process over a Unix socket (SCM_RIGHTS), then closes its own copy
  (close(), or syscall(SYS_close)) and exits; the worker echoes B bytes the
  client sends, the client compares them and then reads the end of the
  stream.

Prints "raw_peer: OK <case> ..." or says what differed, and exits 1.
"""
import argparse
import ctypes
import errno
import hashlib
import os
import select
import socket
import sys
import threading
import time

SYS_read, SYS_write, SYS_close, SYS_io_uring_setup = 0, 1, 3, 425
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def sys_call(*args):
    r = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def raw_write_all(fd, data):
    view = memoryview(data)
    buf = ctypes.create_string_buffer(bytes(data), len(data))
    base = ctypes.addressof(buf)
    off = 0
    while off < len(view):
        off += sys_call(SYS_write, fd, ctypes.c_void_p(base + off), min(len(view) - off, 1 << 20))


def raw_read_n(fd, n):
    buf = ctypes.create_string_buffer(1 << 20)
    got = bytearray()
    while len(got) < n:
        k = sys_call(SYS_read, fd, buf, min(n - len(got), 1 << 20))
        if k == 0:
            break
        got += buf.raw[:k]
    return bytes(got)


def fail(msg):
    print("raw_peer: FAIL " + msg, flush=True)
    sys.exit(1)


def listener():
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    ls.settimeout(30)
    return ls


def case_close(a):
    ls = listener()
    c = socket.socket()
    c.setblocking(False)
    try:
        c.connect(ls.getsockname())
    except BlockingIOError:
        pass
    s, _ = ls.accept()  # the client's shim has not looked at its connect yet
    select.select([], [c], [], 30)
    err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        fail("connect failed: %s" % os.strerror(err))
    time.sleep(0.2)  # the client's hello reaches the server's socket, unread
    fd = s.detach()
    sys_call(SYS_close, fd)
    r, w = os.pipe()  # takes the closed number back
    if fd not in (r, w):
        print("raw_peer: note: the pipe did not reuse fd %d (%d, %d)" % (fd, r, w), flush=True)
    os.write(w, b"through the pipe")
    if os.read(r, 100) != b"through the pipe":
        fail("a pipe on the closed number did not carry its bytes")
    c.setblocking(True)
    c.settimeout(30)
    try:
        d = c.recv(100)
    except ConnectionResetError:
        fail("the client read a reset where TCP gives the end of the stream")
    if d != b"":
        fail("the client read %r, not the end of the stream" % d)
    print("raw_peer: OK close", flush=True)


def case_io(a):
    ls = listener()
    data = {"c": os.urandom(a.bytes), "s": os.urandom(a.bytes)}
    res = {}

    def side(name, sock):
        sock.setblocking(True)  # Python's timeouts make the socket nonblocking
        fd = sock.fileno()
        # A byte each way first: by then both ends met each other's hello,
        # and the bulk goes where the connection settled.
        if name == "c":
            raw_write_all(fd, b"?")
            greeting = raw_read_n(fd, 1)
        else:
            greeting = raw_read_n(fd, 1)
            raw_write_all(fd, b"!")
        if greeting not in (b"?", b"!"):
            fail("the %s read the greeting %r" % (name, greeting))
        t = threading.Thread(target=raw_write_all, args=(fd, data[name]))
        t.start()
        res[name] = raw_read_n(fd, a.bytes)
        t.join()

    c = socket.create_connection(ls.getsockname(), timeout=30)
    s, _ = ls.accept()
    ts = threading.Thread(target=side, args=("s", s))
    ts.start()
    side("c", c)
    ts.join()
    if res.get("s") != data["c"]:
        fail("the server read %d bytes, not the client's %d" % (len(res.get("s", b"")), a.bytes))
    if res.get("c") != data["s"]:
        fail("the client read %d bytes, not the server's %d" % (len(res.get("c", b"")), a.bytes))
    c.close()
    s.close()
    print("raw_peer: OK io bytes=%d" % a.bytes, flush=True)


def case_io_uring(a):
    params = ctypes.create_string_buffer(120)
    try:
        fd = sys_call(SYS_io_uring_setup, 4, params)
        os.close(fd)
        print("raw_peer: OK io_uring setup=ok", flush=True)
    except OSError as e:
        print("raw_peer: OK io_uring setup=%s" % errno.errorcode.get(e.errno, e.errno), flush=True)


def worker(chan_fd, nbytes):
    chan = socket.socket(fileno=chan_fd)
    msg, fds, _, _ = socket.recv_fds(chan, 16, 1)
    if msg != b"conn" or len(fds) != 1:
        fail("the worker got %r and %d descriptors" % (msg, len(fds)))
    s = socket.socket(fileno=fds[0])
    s.settimeout(30)
    left = nbytes
    while left:
        d = s.recv(min(left, 1 << 20))
        if not d:
            fail("the worker met the end of the stream with %d bytes to come" % left)
        s.sendall(d)
        left -= len(d)
    s.shutdown(socket.SHUT_WR)
    if s.recv(1) != b"":
        fail("the worker read more than the client sent")
    s.close()
    sys.exit(0)  # an orderly exit: the shim writes this process's stats


def case_handoff(a, raw):
    ls = listener()
    a_end, b_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        ls.close()
        a_end.close()
        worker(b_end.detach(), a.bytes)
    b_end.close()
    data = os.urandom(a.bytes)
    got = {}

    def client():
        c = socket.create_connection(ls.getsockname(), timeout=30)
        t = threading.Thread(target=c.sendall, args=(data,))
        t.start()
        h = hashlib.sha256()
        n = 0
        while True:
            try:
                d = c.recv(1 << 20)
            except ConnectionResetError:
                got["err"] = "reset after %d bytes" % n
                break
            if not d:
                break
            h.update(d)
            n += len(d)
        t.join()
        got["n"], got["sum"] = n, h.digest()
        c.close()

    tc = threading.Thread(target=client)
    tc.start()
    s, _ = ls.accept()
    socket.send_fds(a_end, [b"conn"], [s.fileno()])
    fd = s.detach()
    if raw:
        sys_call(SYS_close, fd)
    else:
        os.close(fd)
    a_end.close()
    tc.join(60)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        fail("the worker exited with status %#x" % status)
    if "err" in got:
        fail("the client read a " + got["err"])
    if got.get("n") != a.bytes or got.get("sum") != hashlib.sha256(data).digest():
        fail("the client read back %s bytes of %d, or other bytes" % (got.get("n"), a.bytes))
    print("raw_peer: OK handoff%s bytes=%d" % ("-raw" if raw else "", a.bytes), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["close", "io", "io_uring", "handoff", "handoff-raw"])
    p.add_argument("--bytes", type=int, default=8 << 20)
    a = p.parse_args()
    if a.case == "close":
        case_close(a)
    elif a.case == "io":
        case_io(a)
    elif a.case == "io_uring":
        case_io_uring(a)
    else:
        case_handoff(a, a.case == "handoff-raw")


if __name__ == "__main__":
    main()

/* Wrappers of the data calls. An fd that is not ours goes straight to libc
 * (the cost every file and pipe read pays: one table load). A tracked
 * connection served by the kernel goes to libc too, and its bytes are
 * counted; one whose bytes the shim moves goes to the stream engine. */
#include <errno.h>
#include <limits.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "adopt.h"
#include "iovec.h"
#include "sendfile.h"
#include "splice.h"
#include "stream.h"
#include "wrap.h"

extern void __chk_fail(void) __attribute__((noreturn));

/* The engine's answer as a libc return value. */
static ssize_t engine_ret(r2s_conn_t *c, ssize_t n)
{
  r2s__conn_put(c);
  if (n < 0) {
    errno = (int)-n;
    return -1;
  }
  return n;
}

static ssize_t engine_recv(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags)
{
  if (__builtin_expect(flags & MSG_OOB, 0)) {
    /* The urgent byte itself always travels through the kernel. */
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    ssize_t n = r2s__libc.recvmsg(fd, &m, flags);
    return engine_ret(c, n < 0 ? -errno : n);
  }
  return engine_ret(c, r2s__stream_recv(c, fd, iov, cnt, flags));
}

static ssize_t engine_send(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags)
{
  if (__builtin_expect(flags & MSG_OOB, 0))
    return engine_ret(c, r2s__stream_send_oob(c, fd, iov, cnt, flags));
  return engine_ret(c, r2s__stream_send(c, fd, iov, cnt, flags));
}

/* read(2) and readv(2) of no bytes: the kernel answers before it looks at
 * the socket (sock_read_iter: 0, whatever is queued, ended or pending; or
 * EINVAL for a bad count), so its answer is the answer, and the link is
 * not asked. recv and recvmsg of no bytes do look: stream.c. */
static bool reads_nothing(const struct iovec *iov, int cnt)
{
  return cnt <= 0 || (cnt <= IOV_MAX && r2s__iov_total(iov, cnt) == 0);
}

R2S_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
  r2s_conn_t *c = wrap_io_lookup(fd, 0);
  if (c && !r2s__conn_passthrough(c) && n) return engine_recv(c, fd, &(struct iovec){buf, n}, 1, 0);
  ssize_t r = r2s__libc.read(fd, buf, n);
  if (c) wrap_done_rx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
  r2s_conn_t *c = wrap_io_lookup(fd, 0);
  if (c && !r2s__conn_passthrough(c)) return engine_send(c, fd, &(struct iovec){(void *)buf, n}, 1, 0);
  ssize_t r = r2s__libc.write(fd, buf, n);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
  r2s_conn_t *c = wrap_io_lookup(fd, 0);
  if (c && !r2s__conn_passthrough(c) && !reads_nothing(iov, cnt)) return engine_recv(c, fd, iov, cnt, 0);
  ssize_t r = r2s__libc.readv(fd, iov, cnt);
  if (c) wrap_done_rx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
  r2s_conn_t *c = wrap_io_lookup(fd, 0);
  if (c && !r2s__conn_passthrough(c)) return engine_send(c, fd, iov, cnt, 0);
  ssize_t r = r2s__libc.writev(fd, iov, cnt);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && !r2s__conn_passthrough(c)) return engine_send(c, fd, &(struct iovec){(void *)buf, n}, 1, flags);
  ssize_t r = r2s__libc.send(fd, buf, n, flags);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG to,
                          socklen_t tolen)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  /* TCP ignores the address of a connected socket (sockperf passes one on
   * every call), so the bytes take the connection's path like send's. */
  if (c && !r2s__conn_passthrough(c)) return engine_send(c, fd, &(struct iovec){(void *)buf, n}, 1, flags);
  ssize_t r = r2s__libc.sendto(fd, buf, n, flags, to.__sockaddr__, tolen);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  /* The address is ignored as for sendto; ancillary data has no meaning on
   * a connection whose bytes do not pass through the kernel's TCP. */
  if (c && !r2s__conn_passthrough(c)) return engine_send(c, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
  if (msg->msg_controllen && !r2s__in_shim) r2s__adopt_given(msg);
  ssize_t r = r2s__libc.sendmsg(fd, msg, flags);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

static long long mmsg_bytes(const struct mmsghdr *v, int n)
{
  long long sum = 0;
  for (int i = 0; i < n; i++) sum += v[i].msg_len;
  return n < 0 ? -1 : sum;
}

/* A stream socket treats each message as the next part of the stream. */
R2S_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && !r2s__conn_passthrough(c)) {
    unsigned i = 0;
    ssize_t n = 0;
    for (; i < vlen; i++) {
      n = r2s__stream_send(c, fd, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen, flags);
      if (n < 0) break;
      vec[i].msg_len = (unsigned)n;
    }
    r2s__conn_put(c);
    if (i == 0 && vlen > 0) {
      errno = (int)-n;
      return -1;
    }
    return (int)i;
  }
  for (unsigned i = 0; i < vlen && !r2s__in_shim; i++)
    if (vec[i].msg_hdr.msg_controllen) r2s__adopt_given(&vec[i].msg_hdr);
  int r = r2s__libc.sendmmsg(fd, vec, vlen, flags);
  if (c) wrap_done_tx(c, fd, mmsg_bytes(vec, r));
  return r;
}

/* In the receive calls: a read of the socket's error queue (MSG_ERRQUEUE,
 * the kernel's acknowledgements of MSG_ZEROCOPY sends, timestamps) is the
 * kernel's whatever carries the stream, and moves no stream byte. */
R2S_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && (flags & MSG_ERRQUEUE)) {
    ssize_t r = r2s__libc.recv(fd, buf, n, flags);
    wrap_put(c);
    return r;
  }
  if (c && !r2s__conn_passthrough(c)) return engine_recv(c, fd, &(struct iovec){buf, n}, 1, flags);
  ssize_t r = r2s__libc.recv(fd, buf, n, flags);
  /* A peek leaves the bytes in the socket; they are counted when read. */
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG from, socklen_t *fromlen)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && (flags & MSG_ERRQUEUE)) {
    ssize_t r = r2s__libc.recvfrom(fd, buf, n, flags, from.__sockaddr__, fromlen);
    wrap_put(c);
    return r;
  }
  if (c && !r2s__conn_passthrough(c)) {
    if (fromlen) *fromlen = 0; /* what TCP reports: no source address */
    return engine_recv(c, fd, &(struct iovec){buf, n}, 1, flags);
  }
  ssize_t r = r2s__libc.recvfrom(fd, buf, n, flags, from.__sockaddr__, fromlen);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && (flags & MSG_ERRQUEUE)) {
    ssize_t r = r2s__libc.recvmsg(fd, msg, flags);
    wrap_put(c);
    return r;
  }
  if (c && !r2s__conn_passthrough(c)) {
    /* A buffer for ancillary data changes nothing: the stream's bytes
     * come through the link like any read's (straight from the kernel
     * they could be the shim's frames). TCP adds ancillary data only for
     * options such as SO_TIMESTAMP or TCP_INQ, which a carried connection
     * does not give: there is none. */
    msg->msg_namelen = 0;
    msg->msg_flags = 0;
    msg->msg_controllen = 0;
    return engine_recv(c, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
  }
  ssize_t r = r2s__libc.recvmsg(fd, msg, flags);
  if (r >= 0 && msg->msg_controllen && !r2s__in_shim) r2s__adopt_passed(msg);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout)
{
  r2s_conn_t *c = wrap_io_lookup(fd, flags);
  if (c && (flags & MSG_ERRQUEUE)) {
    int r = r2s__libc.recvmmsg(fd, vec, vlen, flags, timeout);
    wrap_put(c);
    return r;
  }
  if (c && !r2s__conn_passthrough(c)) {
    /* The first message waits as the socket says; the rest take what is
     * there (MSG_WAITFORONE is the only behaviour a stream can give). A
     * message of 0 bytes (the end of the stream, or an empty iovec) counts,
     * as the kernel counts it. */
    unsigned i = 0;
    ssize_t n = 0;
    for (; i < vlen; i++) {
      int f = i ? (flags | MSG_DONTWAIT) : flags;
      n = r2s__stream_recv(c, fd, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen,
                           f & ~MSG_WAITFORONE);
      if (n < 0) break;
      vec[i].msg_len = (unsigned)n;
      vec[i].msg_hdr.msg_namelen = 0;
      vec[i].msg_hdr.msg_flags = 0;
      vec[i].msg_hdr.msg_controllen = 0; /* as recvmsg: none */
    }
    r2s__conn_put(c);
    if (i == 0 && n < 0) {
      errno = (int)-n;
      return -1;
    }
    return (int)i;
  }
  int r = r2s__libc.recvmmsg(fd, vec, vlen, flags, timeout);
  for (int i = 0; i < r && !r2s__in_shim; i++)
    if (vec[i].msg_hdr.msg_controllen) r2s__adopt_passed(&vec[i].msg_hdr);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : mmsg_bytes(vec, r));
  return r;
}

R2S_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
  r2s_conn_t *c = wrap_io_lookup(out_fd, 0);
  if (c && !r2s__conn_passthrough(c)) return engine_ret(c, r2s__stream_sendfile(c, out_fd, in_fd, offset, count));
  ssize_t r = r2s__libc.sendfile(out_fd, in_fd, offset, count);
  if (c) wrap_done_tx(c, out_fd, r);
  return r;
}

/* off_t is 64-bit on every target this builds for, so both names share one
 * implementation; glibc makes the same alias. */
R2S_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count)
{
  return sendfile(out_fd, in_fd, offset, count);
}

/* splice between a pipe and a connection the shim carries moves the
 * connection's bytes, not the kernel's (splice.h); one whose link is
 * pass-through is the kernel's to splice, and counted. */
R2S_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags)
{
  r2s_conn_t *c = wrap_io_lookup(fd_in, 0);
  if (c && !r2s__conn_passthrough(c))
    return engine_ret(c, r2s__splice_from_conn(c, fd_in, off_in, fd_out, off_out, len, flags));
  r2s_conn_t *d = wrap_io_lookup(fd_out, 0);
  if (d && !r2s__conn_passthrough(d)) {
    if (c) wrap_put(c);
    return engine_ret(d, r2s__splice_into_conn(d, fd_in, off_in, fd_out, off_out, len, flags));
  }
  ssize_t r = r2s__libc.splice(fd_in, off_in, fd_out, off_out, len, flags);
  if (c) wrap_done_rx(c, fd_in, r);
  if (d) wrap_done_tx(d, fd_out, r);
  return r;
}

/* The _FORTIFY_SOURCE entry points: the same check glibc makes, then the
 * same path as the plain call. */
R2S_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}

R2S_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
  if (n > buflen) __chk_fail();
  return recv(fd, buf, n, flags);
}

R2S_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, __SOCKADDR_ARG from,
                                  socklen_t *fromlen)
{
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, from, fromlen);
}

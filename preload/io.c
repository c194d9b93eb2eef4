/* Wrappers of the data calls. An fd that is not ours goes straight to libc
 * (the cost every file and pipe read pays: one table load). A tracked
 * connection on kernel TCP goes to libc too, and its bytes are counted. */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wrap.h"

extern void __chk_fail(void) __attribute__((noreturn));

R2S_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.read(fd, buf, n);
  if (c) wrap_done_rx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.write(fd, buf, n);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.readv(fd, iov, cnt);
  if (c) wrap_done_rx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.writev(fd, iov, cnt);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.send(fd, buf, n, flags);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG to,
                          socklen_t tolen)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.sendto(fd, buf, n, flags, to.__sockaddr__, tolen);
  if (c) wrap_done_tx(c, fd, r);
  return r;
}

R2S_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
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

R2S_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
  int r = r2s__libc.sendmmsg(fd, vec, vlen, flags);
  if (c) wrap_done_tx(c, fd, mmsg_bytes(vec, r));
  return r;
}

R2S_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.recv(fd, buf, n, flags);
  /* A peek leaves the bytes in the socket; they are counted when read. */
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG from,
                            socklen_t *fromlen)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.recvfrom(fd, buf, n, flags, from.__sockaddr__, fromlen);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
  ssize_t r = r2s__libc.recvmsg(fd, msg, flags);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : r);
  return r;
}

R2S_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
                        struct timespec *timeout)
{
  r2s_conn_t *c = wrap_lookup(fd);
  int r = r2s__libc.recvmmsg(fd, vec, vlen, flags, timeout);
  if (c) wrap_done_rx(c, fd, (flags & MSG_PEEK) ? 0 : mmsg_bytes(vec, r));
  return r;
}

R2S_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
  r2s_conn_t *c = wrap_lookup(out_fd);
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

R2S_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                                  __SOCKADDR_ARG from, socklen_t *fromlen)
{
  if (n > buflen) __chk_fail();
  return recvfrom(fd, buf, n, flags, from, fromlen);
}

/* The link's kernel calls: nonblocking sends and receives that return
 * -errno, and the socket error a call of the shim's took from the kernel,
 * kept for the application's next call. */
#include "internal.h"

#include "libc.h"

ssize_t lk_ksend(int fd, const void *buf, size_t len, int flags)
{
  ssize_t n = r2s__libc.send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  return n < 0 ? -errno : n;
}

ssize_t lk_krecv(int fd, void *buf, size_t len, int flags)
{
  ssize_t n = r2s__libc.recv(fd, buf, len, flags | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

/* The caller's iovec, cut to at most max bytes (and 64 entries: a short
 * read or write is always allowed). */
int lk_trim_iov(struct iovec *out, const struct iovec *iov, int cnt, size_t max)
{
  int k = 0;
  for (int i = 0; i < cnt && k < 64 && max > 0; i++) {
    if (iov[i].iov_len == 0) continue;
    out[k] = iov[i];
    if (out[k].iov_len > max) out[k].iov_len = max;
    max -= out[k].iov_len;
    k++;
  }
  return k;
}

ssize_t lk_krecv_iov(int fd, const struct iovec *iov, int cnt, size_t max, int flags)
{
  struct iovec v[64];
  struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)lk_trim_iov(v, iov, cnt, max)};
  ssize_t n = r2s__libc.recvmsg(fd, &m, flags | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

/* The kernel reports a socket's error (a reset, a time-out) to the first
 * call that meets it, and then no more. When that call was one of the
 * shim's own (a hello, a frame), the error is kept for the application's
 * next call (r2s__link_recv, r2s__link_send), which plain TCP would have
 * given it to. */
void lk_keep_sock_err(r2s_link_t *l, ssize_t n)
{
  int e = (int)-n;
  if (e == ECONNRESET || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == ECONNREFUSED ||
      e == ENETDOWN || e == EHOSTDOWN) {
    int none = 0;
    __atomic_compare_exchange_n(&l->sock_err, &none, -e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
}

/* What the application's call that got n returns: n, or, when it moved no
 * byte, the error kept for it (the kernel reports the error in front of
 * the end of the stream, of EAGAIN, and of the errors that only follow
 * from it, such as EPIPE after a reset). */
ssize_t lk_give_sock_err(r2s_link_t *l, ssize_t n)
{
  if (n > 0 || !__atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE)) return n;
  int e = __atomic_exchange_n(&l->sock_err, 0, __ATOMIC_ACQ_REL);
  return e ? e : n;
}

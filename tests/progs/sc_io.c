#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_io.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sc_util.h"

#define IOV_PIECES 8

/* Splits [base, base+n) into 1..IOV_PIECES consecutive pieces of random
 * length; one time in eight a zero-length iovec is slipped in, which the
 * kernel accepts and a shim must too. Returns the iovec count. */
static int split_iov(struct iovec *iov, uint8_t *base, size_t n, uint64_t *rng)
{
  size_t pieces = 1 + (size_t)sc_rand_below(rng, IOV_PIECES);
  int cnt = 0;

  if (pieces > n) pieces = n;
  for (size_t i = 0; i < pieces; i++) {
    size_t len = n;
    if (i + 1 < pieces) len = 1 + (size_t)sc_rand_below(rng, n - (pieces - 1 - i));
    iov[cnt].iov_base = base;
    iov[cnt++].iov_len = len;
    base += len;
    n -= len;
    if (i == 0 && sc_rand_below(rng, 8) == 0) {
      iov[cnt].iov_base = base;
      iov[cnt++].iov_len = 0;
    }
  }
  return cnt;
}

size_t sc_io_read_size(sc_session_t *s)
{
  size_t want = sc_rx_want(s), ask = sc_rand_size(&s->rx_rng);

  if (want == 0) return 1 + ask % 64;
  return ask < want ? ask : want;
}

ssize_t sc_io_write(sc_session_t *s, const uint8_t *data, size_t n)
{
  struct iovec iov[IOV_PIECES + 1];
  struct msghdr mh;
  /* The iovec API takes non-const pointers; writes never modify them. */
  uint8_t *buf = (uint8_t *)(uintptr_t)data;

  switch (sc_rand_below(&s->tx_rng, 5)) {
  case 0:
    return write(s->fd, data, n);
  case 1:
    return send(s->fd, data, n, MSG_NOSIGNAL);
  case 2:
    return sendto(s->fd, data, n, 0, NULL, 0);
  case 3:
    return writev(s->fd, iov, split_iov(iov, buf, n, &s->tx_rng));
  default:
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)split_iov(iov, buf, n, &s->tx_rng);
    return sendmsg(s->fd, &mh, MSG_NOSIGNAL);
  }
}

/* MSG_PEEK must return bytes that a read then returns again, all of them:
 * they are already queued, so the read cannot come back shorter. */
static ssize_t peek_then_read(sc_session_t *s, size_t want)
{
  ssize_t peeked = recv(s->fd, s->peekbuf, want, MSG_PEEK);
  if (peeked <= 0) return peeked;
  ssize_t got = read(s->fd, s->rxbuf, (size_t)peeked);
  if (got < 0) {
    sc_rx_fail(s, "read after MSG_PEEK of %zd bytes failed: %s", peeked, strerror(errno));
    return SC_IO_BROKEN;
  }
  if (got != peeked) {
    sc_rx_fail(s, "read after MSG_PEEK of %zd bytes returned %zd", peeked, got);
    return SC_IO_BROKEN;
  }
  if (memcmp(s->peekbuf, s->rxbuf, (size_t)got) != 0) {
    sc_rx_fail(s, "bytes read differ from the %zd bytes MSG_PEEK returned", peeked);
    return SC_IO_BROKEN;
  }
  return got;
}

/* recvmsg with room for ancillary data, as some frameworks always give:
 * the stream's bytes come back as with any read, and TCP without
 * timestamp options has no ancillary data to add. */
static ssize_t recvmsg_with_control(sc_session_t *s, struct iovec *iov, size_t want)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(64)];
  } control;
  struct msghdr mh;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = iov;
  mh.msg_iovlen = (size_t)split_iov(iov, s->rxbuf, want, &s->rx_rng);
  mh.msg_control = control.buf;
  mh.msg_controllen = sizeof control.buf;
  ssize_t got = recvmsg(s->fd, &mh, 0);
  if (got > 0 && (mh.msg_controllen != 0 || (mh.msg_flags & MSG_CTRUNC))) {
    sc_rx_fail(s, "recvmsg with a control buffer returned %zu bytes of ancillary data (flags %#x)",
               (size_t)mh.msg_controllen, (unsigned)mh.msg_flags);
    return SC_IO_BROKEN;
  }
  return got;
}

/* Linux returns a short MSG_WAITALL read only at EOF, on an error or on a
 * signal (none is caught here), so a short result on a connection that is
 * still open and has no error is a broken recv. */
static ssize_t recv_waitall(sc_session_t *s, size_t want)
{
  ssize_t got = recv(s->fd, s->rxbuf, want, MSG_WAITALL);
  if (got <= 0 || (size_t)got == want) return got;
  char probe;
  ssize_t q = recv(s->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (q > 0 || (q < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
    sc_rx_fail(s, "recv(MSG_WAITALL, %zu) returned %zd on an open connection", want, got);
    return SC_IO_BROKEN;
  }
  return got;
}

/* A read of no bytes. Linux answers 0 without taking a byte, whatever is
 * queued: read and readv at once; recv and recvmsg once a byte or the end
 * of the stream is there (a blocking one waits for it, which always comes
 * here: the caller reads only what the peer still sends), and EAGAIN
 * instead when nonblocking and nothing is there; recvmmsg counts one empty
 * message. A shim that took such a read for the end of the stream would
 * end it early, which the stream's check then reports. */
static int zero_read(sc_session_t *s, bool blocking)
{
  struct iovec iov[2] = {{s->rxbuf, 0}, {s->rxbuf, 0}};
  struct msghdr mh;
  struct mmsghdr mm;
  const char *how;
  ssize_t r, ok = 0;
  bool may_wait = false; /* recv-like: EAGAIN is allowed on a nonblocking socket */

  memset(&mh, 0, sizeof(mh));
  memset(&mm, 0, sizeof(mm));
  switch (sc_rand_below(&s->rx_rng, 10)) {
  case 0:
    how = "read(fd, buf, 0)";
    r = read(s->fd, s->rxbuf, 0);
    break;
  case 1:
    how = "readv with no iovec";
    r = readv(s->fd, iov, 0);
    break;
  case 2:
    how = "readv with two empty iovecs";
    r = readv(s->fd, iov, 2);
    break;
  case 3:
    how = "recv(fd, buf, 0, 0)", may_wait = true;
    r = recv(s->fd, s->rxbuf, 0, 0);
    break;
  case 4:
    how = "recvfrom(fd, buf, 0, 0)", may_wait = true;
    r = recvfrom(s->fd, s->rxbuf, 0, 0, NULL, NULL);
    break;
  case 5:
    how = "recvmsg with no iovec", may_wait = true;
    r = recvmsg(s->fd, &mh, 0);
    break;
  case 6:
    how = "recvmsg with an empty iovec", may_wait = true;
    mh.msg_iov = iov;
    mh.msg_iovlen = 1;
    r = recvmsg(s->fd, &mh, 0);
    break;
  case 7:
    how = "recv(fd, buf, 0, MSG_PEEK)", may_wait = true;
    r = recv(s->fd, s->rxbuf, 0, MSG_PEEK);
    break;
  case 8:
    how = "recv(fd, buf, 0, MSG_DONTWAIT)", may_wait = true, blocking = false;
    r = recv(s->fd, s->rxbuf, 0, MSG_DONTWAIT);
    break;
  default:
    how = "recvmmsg of one empty message", may_wait = true, ok = 1;
    mm.msg_hdr.msg_iov = iov;
    mm.msg_hdr.msg_iovlen = 1;
    mm.msg_len = 1; /* must become 0 */
    r = recvmmsg(s->fd, &mm, 1, 0, NULL);
    if (r == 1 && mm.msg_len != 0) r = 2;
    break;
  }
  if (r == ok) return 0;
  if (r < 0 && may_wait && !blocking && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (r < 0) return sc_rx_fail(s, "%s failed: %s", how, strerror(errno));
  return sc_rx_fail(s, "%s returned %zd, expected %zd", how, r, ok);
}

ssize_t sc_io_read(sc_session_t *s, size_t want, bool blocking)
{
  struct iovec iov[IOV_PIECES + 1];
  struct msghdr mh;

  if ((s->p.flags & SC_F_ZERO_READS) && s->hdr_known && zero_read(s, blocking) != 0) return SC_IO_BROKEN;
  switch (sc_rand_below(&s->rx_rng, blocking ? 8 : 7)) {
  case 0:
    return read(s->fd, s->rxbuf, want);
  case 1:
    return recv(s->fd, s->rxbuf, want, 0);
  case 2:
    return recvfrom(s->fd, s->rxbuf, want, 0, NULL, NULL);
  case 3:
    return readv(s->fd, iov, split_iov(iov, s->rxbuf, want, &s->rx_rng));
  case 4:
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)split_iov(iov, s->rxbuf, want, &s->rx_rng);
    return recvmsg(s->fd, &mh, 0);
  case 5:
    return recvmsg_with_control(s, iov, want);
  case 6:
    return peek_then_read(s, want);
  default:
    return recv_waitall(s, want);
  }
}

/* Shared-memory rings handed over by file descriptor (shm_fd.h). */
#include "shm_fd.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "../libc.h"

_Static_assert(sizeof(((struct sockaddr_un *)0)->sun_path) == R2S_FETCH_ADDR_MAX, "FETCH carries a sun_path");

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* Connections a taker looks at for the owner's message: others may have
 * connected first (anyone in the network namespace can), each costs an
 * accept and a receive. */
#define TAKE_TRIES 8

static void close_fd(int fd)
{
  if (fd >= 0) r2s__libc.close(fd);
}

int r2s__shm_fd_ring(size_t bytes, size_t reserve)
{
  int fd = (int)r2s__libc.syscall(SYS_memfd_create, "r2s-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  int rc = ftruncate(fd, (off_t)bytes) < 0 ? errno : posix_fallocate(fd, 0, (off_t)reserve);
  if (!rc && r2s__libc.fcntl(fd, F_ADD_SEALS, RING_SEALS) < 0) rc = errno;
  if (rc) {
    close_fd(fd);
    return -rc;
  }
  return fd;
}

int r2s__shm_fd_check(int fd, size_t bytes)
{
  struct stat sb;
  int seals = r2s__libc.fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & RING_SEALS) != RING_SEALS || (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
    return -EPROTO;
  if (r2s__fstat_raw(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != bytes) return -EPROTO;
  return 0;
}

void r2s__shm_fd_unlisten(int fd, ino_t ino)
{
  if (r2s__still_sock(fd, ino)) r2s__libc.close(fd);
}

int r2s__shm_fd_listen(r2s_fetch_t *addr, ino_t *ino)
{
  int fd = r2s__libc.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  /* The family alone: the kernel picks an unused abstract name (autobind). */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  socklen_t len = sizeof sa;
  if (r2s__libc.bind(fd, (struct sockaddr *)&sa, sizeof(sa_family_t)) < 0 || r2s__libc.listen(fd, TAKE_TRIES) < 0 ||
      r2s__libc.getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    int err = errno;
    close_fd(fd);
    return -err;
  }
  size_t n = len - offsetof(struct sockaddr_un, sun_path);
  if (n == 0 || n > R2S_FETCH_ADDR_MAX || sa.sun_path[0] != 0) {
    close_fd(fd);
    return -EAFNOSUPPORT;
  }
  int rc = r2s__sock_ino(fd, ino);
  if (rc < 0) {
    close_fd(fd);
    return rc;
  }
  memset(addr, 0, sizeof *addr);
  addr->addr_len = (uint8_t)n;
  memcpy(addr->addr, sa.sun_path, n);
  return fd;
}

int r2s__shm_fd_send(const r2s_fetch_t *to, int ring_fd, uint8_t nonce[R2S_NONCE_LEN])
{
  if (to->addr_len == 0 || to->addr_len > R2S_FETCH_ADDR_MAX || to->addr[0] != 0) return -EINVAL;
  if (getrandom(nonce, R2S_NONCE_LEN, 0) != R2S_NONCE_LEN) return -EIO;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, to->addr, to->addr_len);
  int fd = r2s__libc.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  /* A listening socket takes the connection at once (or its backlog is
   * full: EAGAIN), and the message waits for its accept. */
  int rc = 0;
  if (r2s__libc.connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + to->addr_len)) < 0) {
    rc = -errno;
  } else {
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int))];
    } c;
    memset(&c, 0, sizeof c);
    struct iovec v = {nonce, R2S_NONCE_LEN};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &ring_fd, sizeof(int));
    ssize_t n = r2s__libc.sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != R2S_NONCE_LEN) rc = n < 0 ? -errno : -EIO;
  }
  close_fd(fd);
  return rc;
}

/* One connection's message: the descriptor it carried if it carried
 * exactly the nonce and one descriptor; every other descriptor closed. */
static int take_one(int conn, const uint8_t nonce[R2S_NONCE_LEN])
{
  uint8_t got[R2S_NONCE_LEN + 1];
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } c;
  struct iovec v = {got, sizeof got};
  struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
  ssize_t n = r2s__libc.recvmsg(conn, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return -errno;
  int fds[4], nfd = 0;
  for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
      if (nfd < 4)
        fds[nfd++] = fd;
      else
        close_fd(fd);
    }
  }
  if (n == R2S_NONCE_LEN && !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && nfd == 1 &&
      memcmp(got, nonce, R2S_NONCE_LEN) == 0)
    return fds[0];
  for (int i = 0; i < nfd; i++) close_fd(fds[i]);
  return -ENOMSG;
}

int r2s__shm_fd_take(int listener, ino_t ino, const uint8_t nonce[R2S_NONCE_LEN])
{
  /* Another socket under that number would be the application's: none of
   * its connections is ours to take. */
  if (!r2s__still_sock(listener, ino)) return -EBADF;
  for (int i = 0; i < TAKE_TRIES; i++) {
    int conn = r2s__libc.accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn < 0) return errno == EAGAIN ? -ENOMSG : -errno;
    int ring = take_one(conn, nonce);
    close_fd(conn);
    if (ring >= 0) return ring;
  }
  return -ENOMSG;
}

/* The lock-discipline check of R2SOCK_LOCK_DEBUG builds (lockdebug.h):
 * the blocking entry points of the libc table, wrapped. */
#include "lockdebug.h"

#ifdef R2S_LOCK_DEBUG

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libc.h"

__thread int r2s__locks_held;

/* The real entry points, as r2s__libc_load found them. */
static r2s_libc_t real;

void r2s__lock_debug_blocking(const char *call)
{
  if (r2s__locks_held <= 0) return;
  r2s__say_raw("r2sock: lock discipline broken: ", call,
               " can block, and this thread holds a lock of the shim (docs/internals.md)\n");
  abort();
}

/* Whether a call on fd in blocking mode can wait for another party: a
 * socket, a pipe or a terminal can. A regular file (/proc, the
 * configuration) is read at once, and a device's command channel answers
 * at once (libibverbs writes its commands to the uverbs device, and
 * Soft-RoCE's sends too, through the shim's write). */
static bool can_wait(int fd)
{
  struct stat sb;
  if (r2s__syscall(SYS_fstat, fd, &sb) != 0) return false;
  if (S_ISSOCK(sb.st_mode) || S_ISFIFO(sb.st_mode)) return true;
  return S_ISCHR(sb.st_mode) && isatty(fd);
}

/* A call on fd without MSG_DONTWAIT waits when fd is in blocking mode
 * and can_wait(fd). */
static void check_fd(const char *call, int fd, int flags)
{
  if (r2s__locks_held <= 0 || (flags & MSG_DONTWAIT)) return;
  int fl = (int)r2s__syscall(SYS_fcntl, fd, F_GETFL);
  if (fl < 0 || (fl & O_NONBLOCK) || !can_wait(fd)) return;
  r2s__lock_debug_blocking(call);
}

static int d_poll(struct pollfd *p, nfds_t n, int ms)
{
  if (ms != 0) r2s__lock_debug_blocking("poll");
  return real.poll(p, n, ms);
}
static int d_ppoll(struct pollfd *p, nfds_t n, const struct timespec *ts, const sigset_t *m)
{
  if (!ts || ts->tv_sec || ts->tv_nsec) r2s__lock_debug_blocking("ppoll");
  return real.ppoll(p, n, ts, m);
}
static int d_select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
  if (!tv || tv->tv_sec || tv->tv_usec) r2s__lock_debug_blocking("select");
  return real.select(n, r, w, e, tv);
}
static int d_pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *m)
{
  if (!ts || ts->tv_sec || ts->tv_nsec) r2s__lock_debug_blocking("pselect");
  return real.pselect(n, r, w, e, ts, m);
}
static int d_epoll_wait(int ep, struct epoll_event *ev, int n, int ms)
{
  if (ms != 0) r2s__lock_debug_blocking("epoll_wait");
  return real.epoll_wait(ep, ev, n, ms);
}
static int d_epoll_pwait(int ep, struct epoll_event *ev, int n, int ms, const sigset_t *m)
{
  if (ms != 0) r2s__lock_debug_blocking("epoll_pwait");
  return real.epoll_pwait(ep, ev, n, ms, m);
}
static int d_epoll_pwait2(int ep, struct epoll_event *ev, int n, const struct timespec *ts, const sigset_t *m)
{
  if (!ts || ts->tv_sec || ts->tv_nsec) r2s__lock_debug_blocking("epoll_pwait2");
  return real.epoll_pwait2(ep, ev, n, ts, m);
}
static ssize_t d_recv(int fd, void *b, size_t len, int fl)
{
  check_fd("recv", fd, fl);
  return real.recv(fd, b, len, fl);
}
static ssize_t d_recvfrom(int fd, void *b, size_t len, int fl, struct sockaddr *a, socklen_t *al)
{
  check_fd("recvfrom", fd, fl);
  return real.recvfrom(fd, b, len, fl, a, al);
}
static ssize_t d_recvmsg(int fd, struct msghdr *m, int fl)
{
  check_fd("recvmsg", fd, fl);
  return real.recvmsg(fd, m, fl);
}
static int d_recvmmsg(int fd, struct mmsghdr *m, unsigned n, int fl, struct timespec *ts)
{
  check_fd("recvmmsg", fd, fl);
  return real.recvmmsg(fd, m, n, fl, ts);
}
static ssize_t d_read(int fd, void *b, size_t len)
{
  check_fd("read", fd, 0);
  return real.read(fd, b, len);
}
static ssize_t d_readv(int fd, const struct iovec *v, int n)
{
  check_fd("readv", fd, 0);
  return real.readv(fd, v, n);
}
static ssize_t d_send(int fd, const void *b, size_t len, int fl)
{
  check_fd("send", fd, fl);
  return real.send(fd, b, len, fl);
}
static ssize_t d_sendto(int fd, const void *b, size_t len, int fl, const struct sockaddr *a, socklen_t al)
{
  check_fd("sendto", fd, fl);
  return real.sendto(fd, b, len, fl, a, al);
}
static ssize_t d_sendmsg(int fd, const struct msghdr *m, int fl)
{
  check_fd("sendmsg", fd, fl);
  return real.sendmsg(fd, m, fl);
}
static int d_sendmmsg(int fd, struct mmsghdr *m, unsigned n, int fl)
{
  check_fd("sendmmsg", fd, fl);
  return real.sendmmsg(fd, m, n, fl);
}
static ssize_t d_write(int fd, const void *b, size_t len)
{
  check_fd("write", fd, 0);
  return real.write(fd, b, len);
}
static ssize_t d_writev(int fd, const struct iovec *v, int n)
{
  check_fd("writev", fd, 0);
  return real.writev(fd, v, n);
}
static int d_connect(int fd, const struct sockaddr *a, socklen_t al)
{
  check_fd("connect", fd, 0);
  return real.connect(fd, a, al);
}
static int d_accept(int fd, struct sockaddr *a, socklen_t *al)
{
  check_fd("accept", fd, 0);
  return real.accept(fd, a, al);
}
static int d_accept4(int fd, struct sockaddr *a, socklen_t *al, int fl)
{
  check_fd("accept4", fd, 0);
  return real.accept4(fd, a, al, fl);
}

void r2s__lock_debug_install(void)
{
  /* Racing loaders store the same values (libc.c): the real pointers are
   * taken from the table only while it holds them, never our checks. */
#define KEEP(name)                                                                                           \
  do {                                                                                                       \
    void *p = __atomic_load_n((void **)&r2s__libc.name, __ATOMIC_ACQUIRE);                                  \
    if (p && p != (void *)d_##name) {                                                                        \
      __atomic_store_n((void **)&real.name, p, __ATOMIC_RELEASE);                                           \
      __atomic_store_n((void **)&r2s__libc.name, (void *)d_##name, __ATOMIC_RELEASE);                       \
    }                                                                                                        \
  } while (0)
  KEEP(poll);
  KEEP(ppoll);
  KEEP(select);
  KEEP(pselect);
  KEEP(epoll_wait);
  KEEP(epoll_pwait);
  KEEP(epoll_pwait2);
  KEEP(recv);
  KEEP(recvfrom);
  KEEP(recvmsg);
  KEEP(recvmmsg);
  KEEP(read);
  KEEP(readv);
  KEEP(send);
  KEEP(sendto);
  KEEP(sendmsg);
  KEEP(sendmmsg);
  KEEP(write);
  KEEP(writev);
  KEEP(connect);
  KEEP(accept);
  KEEP(accept4);
#undef KEEP
}

#else
typedef int r2s_lockdebug_unused_t; /* ISO C wants a translation unit to declare something */
#endif

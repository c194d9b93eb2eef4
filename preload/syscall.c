/* The wrapper of syscall(2). A program that makes a system call through
 * libc's syscall() rather than its named function reaches the shim here,
 * and gets what the named function's wrapper gives it:
 *  - a call on a descriptor the shim tracks (the fd table's: close, the
 *    dup family, fcntl, close_range; a connection's: connect, accept,
 *    shutdown, reads, writes, splice, epoll_ctl), and the waits (poll,
 *    epoll_wait), go to those wrappers, so that no byte of the shim's
 *    reaches the application by a call it made this way, and the fd
 *    table stays the kernel's shadow (libuv closes every descriptor with
 *    syscall(SYS_close): without this the table kept the numbers it
 *    freed, and the peer met unread hellos);
 *  - seccomp(2), which glibc has no wrapper for, tells the shim first
 *    (sandbox.h);
 *  - io_uring_setup(2) fails with ENOSYS, as under a container's default
 *    seccomp profile, while this process may upgrade connections: what a
 *    program submits to a ring (libuv's epoll_ctl batches, or reads and
 *    writes of a socket) never passes the shim, which could then not wake
 *    its epoll waits or keep the shim's frames out of its reads. io_uring's
 *    users fall back to the plain calls (libuv does); those that reach the
 *    kernel without libc's syscall() are not seen (README, Limitations).
 * Every other number, and every argument, passes through unchanged. */
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <linux/seccomp.h>
#include <sys/epoll.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "log.h"
#include "rules.h"
#include "sandbox.h"
#include "stats.h"
#include "wrap.h"

static long refuse_io_uring(void)
{
  static int said;
  R2S_STAT_INC(io_uring_refused);
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED) == 0)
    r2s__debug("io_uring_setup through syscall() refused (ENOSYS): the shim could not see what the ring does");
  errno = ENOSYS;
  return -1;
}

/* fd is a descriptor the shim tracks. */
static bool tracked(long fd)
{
  r2s_conn_t *c = r2s__fd_get((int)fd);
  if (!c) return false;
  r2s__conn_put(c);
  return true;
}

/* The wrapper's answer to the call, in *out, if one of the shim's
 * descriptors is in it (or, for the waits and close_range, may be):
 * true. Only once the shim is up, and never inside it: allocators call
 * syscall() while they start (jemalloc reads /proc this way inside its
 * first malloc), and starting the shim from there would wait on their
 * lock. Before start-up no descriptor is the shim's. */
static bool route(long number, long a1, long a2, long a3, long a4, long a5, long a6, long *out)
{
  if (!__atomic_load_n(&r2s__ready, __ATOMIC_ACQUIRE) || r2s__in_shim) return false;
  int fd = (int)a1;
  void *p2 = (void *)a2, *p4 = (void *)a4;
  switch (number) {
  case SYS_close_range:
    *out = close_range((unsigned)a1, (unsigned)a2, (int)a3);
    return true;
#ifdef SYS_poll
  case SYS_poll:
    *out = poll((struct pollfd *)a1, (nfds_t)a2, (int)a3);
    return true;
#endif
#ifdef SYS_epoll_wait
  case SYS_epoll_wait:
    *out = epoll_wait(fd, p2, (int)a3, (int)a4);
    return true;
#endif
  case SYS_epoll_pwait:
    *out = epoll_pwait(fd, p2, (int)a3, (int)a4, (const sigset_t *)a5);
    return true;
  case SYS_epoll_ctl:
    if (!tracked(a3)) return false;
    *out = epoll_ctl(fd, (int)a2, (int)a3, p4);
    return true;
#ifdef SYS_dup2
  case SYS_dup2:
#endif
  case SYS_dup3:
    /* The new number may be one of ours, which this closes. */
    if (!tracked(a1) && !tracked(a2)) return false;
    *out = number == SYS_dup3 ? dup3(fd, (int)a2, (int)a3) : dup2(fd, (int)a2);
    return true;
  case SYS_splice:
    if (!tracked(a1) && !tracked(a3)) return false;
    *out = splice(fd, p2, (int)a3, p4, (size_t)a5, (unsigned)a6);
    return true;
  }
  if (!tracked(a1)) return false;
  switch (number) {
  case SYS_close:
    *out = wrap_close(fd, true);
    return true;
  case SYS_dup:
    *out = dup(fd);
    return true;
  case SYS_fcntl:
    *out = fcntl(fd, (int)a2, (void *)a3);
    return true;
  case SYS_ioctl:
    *out = ioctl(fd, (unsigned long)a2, (void *)a3);
    return true;
  case SYS_connect:
    *out = connect(fd, p2, (socklen_t)a3);
    return true;
  case SYS_accept:
    *out = accept(fd, p2, (socklen_t *)a3);
    return true;
  case SYS_accept4:
    *out = accept4(fd, p2, (socklen_t *)a3, (int)a4);
    return true;
  case SYS_listen:
    *out = listen(fd, (int)a2);
    return true;
  case SYS_shutdown:
    *out = shutdown(fd, (int)a2);
    return true;
  case SYS_setsockopt:
    *out = setsockopt(fd, (int)a2, (int)a3, p4, (socklen_t)a5);
    return true;
  case SYS_getsockopt:
    *out = getsockopt(fd, (int)a2, (int)a3, p4, (socklen_t *)a5);
    return true;
  case SYS_read:
    *out = read(fd, p2, (size_t)a3);
    return true;
  case SYS_write:
    *out = write(fd, p2, (size_t)a3);
    return true;
  case SYS_readv:
    *out = readv(fd, p2, (int)a3);
    return true;
  case SYS_writev:
    *out = writev(fd, p2, (int)a3);
    return true;
  case SYS_recvfrom:
    *out = recvfrom(fd, p2, (size_t)a3, (int)a4, (void *)a5, (socklen_t *)a6);
    return true;
  case SYS_sendto:
    *out = sendto(fd, p2, (size_t)a3, (int)a4, (void *)a5, (socklen_t)a6);
    return true;
  case SYS_recvmsg:
    *out = recvmsg(fd, p2, (int)a3);
    return true;
  case SYS_sendmsg:
    *out = sendmsg(fd, p2, (int)a3);
    return true;
  case SYS_recvmmsg:
    *out = recvmmsg(fd, p2, (unsigned)a3, (int)a4, (void *)a5);
    return true;
  case SYS_sendmmsg:
    *out = sendmmsg(fd, p2, (unsigned)a3, (int)a4);
    return true;
  case SYS_sendfile:
    *out = sendfile(fd, (int)a2, (off_t *)a3, (size_t)a4);
    return true;
  }
  return false;
}

/* The kernel reads up to six register-sized arguments; so does this, as
 * glibc's own does, and passes each on as its call's type. */
R2S_EXPORT long syscall(long number, ...)
{
  va_list ap;
  va_start(ap, number);
  long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
  long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
  va_end(ap);
  long r;
  if (route(number, a1, a2, a3, a4, a5, a6, &r)) return r;
  if (number == SYS_io_uring_setup) {
    r2s__ensure_init();
    /* ENOSYS only where a connection may still upgrade. */
    if (!r2s__sandboxed() && r2s__upgrades_possible()) return refuse_io_uring();
  } else if (number == SYS_seccomp && (a1 == SECCOMP_SET_MODE_FILTER || a1 == SECCOMP_SET_MODE_STRICT)) {
    r2s__ensure_init();
    r2s__sandbox_enter();
  }
  return r2s__syscall(number, a1, a2, a3, a4, a5, a6);
}

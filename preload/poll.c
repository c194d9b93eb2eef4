/* Wrappers of the readiness calls. While every connection of the process is
 * on kernel TCP, the kernel's answer is the whole answer, so these only make
 * sure the shim is started. The transports add the readiness the kernel
 * cannot see (bytes waiting in a ring) here. */
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "wrap.h"

extern void __chk_fail(void) __attribute__((noreturn));

R2S_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  r2s__ensure_init();
  return r2s__libc.poll(fds, n, timeout);
}

R2S_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
  if (fdslen / sizeof *fds < n) __chk_fail();
  return poll(fds, n, timeout);
}

R2S_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
  r2s__ensure_init();
  return r2s__libc.ppoll(fds, n, tmo, mask);
}

R2S_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo)
{
  r2s__ensure_init();
  return r2s__libc.select(n, r, w, e, tmo);
}

R2S_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
                       const sigset_t *mask)
{
  r2s__ensure_init();
  return r2s__libc.pselect(n, r, w, e, tmo, mask);
}

R2S_EXPORT int epoll_create(int size)
{
  r2s__ensure_init();
  return r2s__libc.epoll_create(size);
}

R2S_EXPORT int epoll_create1(int flags)
{
  r2s__ensure_init();
  return r2s__libc.epoll_create1(flags);
}

R2S_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
  r2s__ensure_init();
  return r2s__libc.epoll_ctl(epfd, op, fd, ev);
}

R2S_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
  r2s__ensure_init();
  return r2s__libc.epoll_wait(epfd, ev, max, timeout);
}

R2S_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
                           const sigset_t *mask)
{
  r2s__ensure_init();
  return r2s__libc.epoll_pwait(epfd, ev, max, timeout, mask);
}

R2S_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                            const sigset_t *mask)
{
  r2s__ensure_init();
  return R2S_LIBC_OR_ENOSYS(epoll_pwait2, epfd, ev, max, tmo, mask);
}

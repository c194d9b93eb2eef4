/* Wrappers of the readiness calls. While no connection of the process is
 * carried by the shim the kernel's answer is the whole answer; otherwise
 * src/ (readiness.h) merges what the rings know with what the kernel knows. */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include "link.h"
#include "readiness.h"
#include "wrap.h"

extern void __chk_fail(void) __attribute__((noreturn));

static inline bool shim_waits(void)
{
  return __atomic_load_n(&r2s__links_active, __ATOMIC_RELAXED) != 0 && !r2s__in_shim;
}

static int ret_errno(int rc)
{
  if (rc < 0) {
    errno = -rc;
    return -1;
  }
  return rc;
}

static int ts_ms(const struct timespec *ts)
{
  if (!ts) return -1;
  long long ms = (long long)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

R2S_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
  r2s__ensure_init();
  if (shim_waits()) {
    int rc = r2s__ready_poll(fds, n, timeout, NULL);
    if (rc != -ENOENT) return ret_errno(rc);
  }
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
  if (shim_waits()) {
    int rc = r2s__ready_poll(fds, n, ts_ms(tmo), mask);
    if (rc != -ENOENT) return ret_errno(rc);
  }
  return r2s__libc.ppoll(fds, n, tmo, mask);
}

R2S_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo)
{
  r2s__ensure_init();
  if (shim_waits()) {
    int ms = -1;
    if (tmo) {
      long long v = (long long)tmo->tv_sec * 1000 + (tmo->tv_usec + 999) / 1000;
      ms = v > 0x7fffffff ? 0x7fffffff : (int)v;
    }
    int rc = r2s__ready_select(n, r, w, e, ms, NULL);
    if (rc != -ENOENT) {
      if (tmo && rc == 0) tmo->tv_sec = 0, tmo->tv_usec = 0; /* Linux: the time left */
      return ret_errno(rc);
    }
  }
  return r2s__libc.select(n, r, w, e, tmo);
}

R2S_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
                       const sigset_t *mask)
{
  r2s__ensure_init();
  if (shim_waits()) {
    int rc = r2s__ready_select(n, r, w, e, ts_ms(tmo), mask);
    if (rc != -ENOENT) return ret_errno(rc);
  }
  return r2s__libc.pselect(n, r, w, e, tmo, mask);
}

R2S_EXPORT int epoll_create(int size)
{
  r2s__ensure_init();
  int fd = r2s__libc.epoll_create(size);
  if (fd >= 0) r2s__epoll_created(fd);
  return fd;
}

R2S_EXPORT int epoll_create1(int flags)
{
  r2s__ensure_init();
  int fd = r2s__libc.epoll_create1(flags);
  if (fd >= 0) r2s__epoll_created(fd);
  return fd;
}

R2S_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
  r2s__ensure_init();
  int rc = r2s__libc.epoll_ctl(epfd, op, fd, ev);
  /* Cheap for fds that are not tracked sockets: one table load. */
  if (rc == 0 && !r2s__in_shim && (op == EPOLL_CTL_DEL || r2s__fd_peek(fd))) {
    int saved = errno;
    r2s__epoll_ctl_shadow(epfd, op, fd, ev);
    errno = saved;
  }
  return rc;
}

R2S_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
  r2s__ensure_init();
  return ret_errno(r2s__epoll_wait(epfd, ev, max, timeout, NULL, NULL, !r2s__in_shim));
}

R2S_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
  r2s__ensure_init();
  return ret_errno(r2s__epoll_wait(epfd, ev, max, timeout, mask, NULL, !r2s__in_shim));
}

R2S_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                            const sigset_t *mask)
{
  r2s__ensure_init();
  return ret_errno(r2s__epoll_wait(epfd, ev, max, ts_ms(tmo), mask, tmo, !r2s__in_shim));
}

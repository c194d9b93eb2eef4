/* Wrappers of the calls that change what an fd number refers to (close, the
 * dup family, fcntl, close_range) or how it behaves (O_NONBLOCK), and fork.
 * They keep the fd table a faithful shadow of the kernel's. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <stdint.h>

#include "link.h"
#include "readiness.h"
#include "wrap.h"

int wrap_close(int fd, bool raw)
{
  r2s__ensure_init();
  /* Empty the slot before the kernel frees the number: after close(2) a
   * socket() in another thread may get it, and must not find us there. */
  r2s_conn_t *c = r2s__fd_remove(fd);
  /* The last fd of a connection the shim carries: control bytes still
   * queued must reach the kernel before it sends the FIN. */
  bool last = c && c->link && __atomic_load_n(&c->nfds, __ATOMIC_ACQUIRE) == 0 &&
              !(r2s__conn_flags(c) & R2S_CONN_FORKED);
  if (last) {
    int saved = errno;
    /* The socket may outlive fd in a descriptor of the shim's: not its
     * epoll registrations (readiness.h). */
    r2s__epoll_forget(fd, c);
    if (!r2s__conn_passthrough(c)) r2s__link_close(c->link, fd, !(r2s__conn_flags(c) & R2S_CONN_UNSEEN));
    errno = saved;
  }
  /* raw: as the application asked, a close that is no cancellation
   * point (libuv's). */
  int rc = raw ? (int)r2s__syscall(SYS_close, fd) : r2s__libc.close(fd);
  if (c) wrap_put(c);
  else r2s__epoll_closed(fd); /* one load unless fd is an epoll set the shim keeps */
  return rc;
}

R2S_EXPORT int close(int fd)
{
  return wrap_close(fd, false);
}

/* newfd now refers to what oldfd refers to. */
static void shadow_dup(int oldfd, int newfd)
{
  int saved = errno;
  r2s_conn_t *gone = r2s__fd_remove(newfd);
  r2s_conn_t *c = r2s__fd_get(oldfd);
  if (c) {
    r2s__fd_install(newfd, c);
    r2s__conn_put(c);
  }
  if (gone) r2s__conn_put(gone);
  errno = saved;
}

R2S_EXPORT int dup(int fd)
{
  r2s__ensure_init();
  int nfd = r2s__libc.dup(fd);
  if (nfd >= 0) shadow_dup(fd, nfd);
  return nfd;
}

R2S_EXPORT int dup2(int fd, int nfd)
{
  r2s__ensure_init();
  int rc = r2s__libc.dup2(fd, nfd);
  if (rc >= 0 && fd != nfd) shadow_dup(fd, nfd);
  return rc;
}

R2S_EXPORT int dup3(int fd, int nfd, int flags)
{
  r2s__ensure_init();
  int rc = r2s__libc.dup3(fd, nfd, flags);
  if (rc >= 0) shadow_dup(fd, nfd);
  return rc;
}

/* The shadow of F_SETFL, F_DUPFD and FIONBIO. */
static void after_fcntl(int fd, int cmd, void *arg, int rc)
{
  if (rc < 0) return;
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
    shadow_dup(fd, rc);
    return;
  }
  if (cmd != F_SETFL) return;
  r2s_conn_t *c = r2s__fd_get(fd);
  if (!c) return;
  r2s__conn_set_flag(c, R2S_CONN_NONBLOCK, ((long)arg & O_NONBLOCK) != 0);
  wrap_put(c);
}

/* fcntl's third argument is an int, a long or a pointer depending on cmd;
 * on the ABIs this builds for all three travel in the same register, so it
 * is read as a pointer and passed on unchanged (glibc does the same). */
R2S_EXPORT int fcntl(int fd, int cmd, ...)
{
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  r2s__ensure_init();
  int rc = r2s__libc.fcntl(fd, cmd, arg);
  if (!r2s__in_shim) after_fcntl(fd, cmd, arg, rc);
  return rc;
}

R2S_EXPORT int fcntl64(int fd, int cmd, ...)
{
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  r2s__ensure_init();
  int rc = r2s__libc.fcntl64 ? r2s__libc.fcntl64(fd, cmd, arg) : r2s__libc.fcntl(fd, cmd, arg);
  if (!r2s__in_shim) after_fcntl(fd, cmd, arg, rc);
  return rc;
}

R2S_EXPORT int ioctl(int fd, unsigned long req, ...)
{
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  r2s_conn_t *c = wrap_lookup(fd);
  if (c && req == SIOCATMARK) {
    r2s__conn_app_oob(c, fd);
    if (arg && !r2s__conn_passthrough(c)) {
      int v = (int)r2s__link_ioctl(c->link, fd, SIOCATMARK);
      r2s__conn_put(c);
      if (v < 0) {
        errno = -v;
        return -1;
      }
      *(int *)arg = v;
      return 0;
    }
  }
  if (c && req == FIONREAD && arg && !r2s__conn_passthrough(c)) {
    /* Bytes in the ring (or in DATA frames) are what the app can read. */
    ssize_t n = r2s__link_ioctl(c->link, fd, FIONREAD);
    r2s__conn_put(c);
    if (n < 0) {
      errno = (int)-n;
      return -1;
    }
    *(int *)arg = n > INT32_MAX ? INT32_MAX : (int)n;
    return 0;
  }
  int rc = r2s__libc.ioctl(fd, req, arg);
  if (c) {
    if (rc == 0 && req == FIONBIO && arg) r2s__conn_set_flag(c, R2S_CONN_NONBLOCK, *(int *)arg != 0);
    wrap_put(c);
  }
  return rc;
}

R2S_EXPORT pid_t fork(void)
{
  /* The shim's own fork handlers are registered at start-up; make sure that
   * happened before the first fork. */
  r2s__ensure_init();
  return r2s__libc.fork();
}

R2S_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
  r2s__ensure_init();
  int rc = R2S_LIBC_OR_ENOSYS(close_range, first, last, flags);
  /* With CLOSE_RANGE_CLOEXEC nothing closes now; exec discards the table. */
  if (rc == 0 && !(flags & CLOSE_RANGE_CLOEXEC)) {
    int saved = errno;
    r2s__fd_remove_range(first, last);
    errno = saved;
  }
  return rc;
}

R2S_EXPORT void closefrom(int lowfd)
{
  r2s__ensure_init();
  if (r2s__libc.closefrom) r2s__libc.closefrom(lowfd);
  if (lowfd < 0) lowfd = 0;
  int saved = errno;
  r2s__fd_remove_range((unsigned)lowfd, ~0u);
  errno = saved;
}

/*
 * wrap.h - what every exported wrapper shares.
 *
 * Contract:
 *  - A wrapper ensures start-up, looks the fd up, and either calls the saved
 *    libc function (an fd that is not ours, or a connection on kernel TCP)
 *    or the engine. Only wrappers set errno; engine calls return -errno.
 *  - wrap_lookup() returns the connection with a reference that the wrapper
 *    drops with wrap_done*(); NULL means "not ours: pass through". Inside the
 *    shim's own calls (r2s__in_shim) nothing is ours.
 *  - Bookkeeping after a libc call saves and restores errno, so the app sees
 *    exactly the errno the kernel gave.
 */
#ifndef R2S_WRAP_H
#define R2S_WRAP_H

#include <errno.h>
#include <sys/socket.h>

#include "conn.h"
#include "fdtable.h"
#include "init.h"
#include "libc.h"

#define R2S_EXPORT __attribute__((visibility("default")))

/* The libc function, or ENOSYS if this libc lacks it (see libc.h). */
#define R2S_LIBC_OR_ENOSYS(name, ...) (r2s__libc.name ? r2s__libc.name(__VA_ARGS__) : (errno = ENOSYS, -1))

static inline r2s_conn_t *wrap_lookup(int fd)
{
  r2s__ensure_init();
  if (__builtin_expect(r2s__in_shim != 0, 0)) return NULL;
  return r2s__fd_get(fd);
}

/* close(fd), through libc's close, or by a bare system call if raw
 * (syscall.c). */
int wrap_close(int fd, bool raw);

/* A nonblocking connect() completes without the app telling us: the first
 * successful send or receive proves the socket is connected. */
static inline void wrap_maybe_established(r2s_conn_t *c, int fd)
{
  if (__builtin_expect(r2s__conn_flags(c) & R2S_CONN_CONNECTING, 0)) r2s__conn_established(c, fd);
}

/* Before a data call: a connect still in progress may have completed (then
 * the hello must go out before the application's first byte), and an
 * application that uses urgent data itself keeps its socket plain. */
void wrap_slow_checks(r2s_conn_t *c, int fd, int flags);

static inline r2s_conn_t *wrap_io_lookup(int fd, int flags)
{
  r2s_conn_t *c = wrap_lookup(fd);
  if (c && __builtin_expect(
               (r2s__conn_flags(c) & (R2S_CONN_CONNECTING | R2S_CONN_FORKED | R2S_CONN_UNSEEN)) || (flags & MSG_OOB),
               0))
    wrap_slow_checks(c, fd, flags);
  return c;
}

/* After a send-side libc call on a tracked socket: count, then drop the ref. */
static inline void wrap_done_tx(r2s_conn_t *c, int fd, long long n)
{
  if (n >= 0) {
    int saved = errno;
    wrap_maybe_established(c, fd);
    r2s__conn_count_tx(c, R2S_PATH_TCP, n);
    errno = saved;
  }
  r2s__conn_put(c);
}

static inline void wrap_done_rx(r2s_conn_t *c, int fd, long long n)
{
  if (n >= 0) {
    int saved = errno;
    wrap_maybe_established(c, fd);
    r2s__conn_count_rx(c, R2S_PATH_TCP, n);
    errno = saved;
  }
  r2s__conn_put(c);
}

/* Drops the reference keeping errno (r2s__conn_put may log at the end). */
static inline void wrap_put(r2s_conn_t *c)
{
  int saved = errno;
  r2s__conn_put(c);
  errno = saved;
}

#endif

/*
 * lockdebug.h - the shim's locks taken through one door, so that the rule
 * "no lock held across a call that can block" (docs/internals.md, "Locks")
 * can be checked.
 *
 * Contract:
 *  - r2s__lock/r2s__trylock/r2s__unlock take and release a mutex of the
 *    kind that must never be held across a blocking call: a link's
 *    rx_lock and tx_lock, an RDMA connection's post_lock and rx_lock.
 *    In a normal build they are pthread_mutex_lock/trylock/unlock and
 *    nothing more.
 *  - Built with -DR2SOCK_LOCK_DEBUG=ON (R2S_LOCK_DEBUG), they count the
 *    locks the calling thread holds (thread-local), and the entry points
 *    of the libc table (libc.h) that can block are replaced at load time
 *    by checks that abort the process with a message naming the call when
 *    the count is not 0: poll, ppoll, select, pselect and the epoll waits
 *    with a time-out other than 0; recv, recvfrom, recvmsg, read, readv,
 *    send, sendto, sendmsg, sendmmsg, recvmmsg, write, writev, connect,
 *    accept and accept4 on a socket, a pipe or a terminal in blocking
 *    mode without MSG_DONTWAIT (a regular file's read, /proc or the
 *    configuration, does not wait, nor does a write of libibverbs'
 *    commands to its device). The shim's own sleeps call r2s__lock_debug_blocking()
 *    first. The debug build is for the test suite, never for users.
 */
#ifndef R2S_LOCKDEBUG_H
#define R2S_LOCKDEBUG_H

#include <pthread.h>

#ifdef R2S_LOCK_DEBUG
extern __thread int r2s__locks_held;
void r2s__lock_debug_blocking(const char *call);
void r2s__lock_debug_install(void);
#else
static inline void r2s__lock_debug_blocking(const char *call)
{
  (void)call;
}
static inline void r2s__lock_debug_install(void) {}
#endif

static inline void r2s__lock(pthread_mutex_t *m)
{
  pthread_mutex_lock(m);
#ifdef R2S_LOCK_DEBUG
  r2s__locks_held++;
#endif
}

static inline int r2s__trylock(pthread_mutex_t *m)
{
  int rc = pthread_mutex_trylock(m);
#ifdef R2S_LOCK_DEBUG
  if (rc == 0) r2s__locks_held++;
#endif
  return rc;
}

static inline void r2s__unlock(pthread_mutex_t *m)
{
#ifdef R2S_LOCK_DEBUG
  r2s__locks_held--;
#endif
  pthread_mutex_unlock(m);
}

#endif

/* The hooks of the fork-while-locked test (fork_locked.c), compiled only
 * into the test build of the module (libr2sock_testhooks.so), which
 * exports them besides the interposed names. */
#include <errno.h>
#include <stdbool.h>

#include "conn.h"
#include "fdtable.h"
#include "link.h"
#include "statseg.h"

enum { HOLD_LINK_RX, HOLD_LINK_TX, HOLD_POOL, HOLD_STATSEG, HOLD_RDMA_DEV };

/* Takes (on) or releases the lock of that kind: a connection's from its
 * fd; the process's otherwise. The same thread releases what it took.
 * Returns 0 or -errno (-ENOTSUP: no hook for that kind). */
__attribute__((visibility("default"))) int r2s__test_lock(int kind, int fd, int on)
{
  pthread_mutex_t *m = NULL;
  if (kind == HOLD_LINK_RX || kind == HOLD_LINK_TX) {
    r2s_conn_t *c = r2s__fd_get(fd);
    if (!c) return -EBADF;
    r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
    if (l) m = r2s__link_lock(l, kind == HOLD_LINK_TX);
    r2s__conn_put(c); /* the fd keeps the connection while the test holds its lock */
    if (!m) return -ENOENT;
  } else if (kind == HOLD_POOL) {
    m = r2s__conn_pool_lock();
  } else if (kind == HOLD_STATSEG) {
    m = r2s__statseg_lock();
  } else {
    /* The RDMA device locks live in rdma_dev.c, whose own child handler
     * re-initialises them; without a device they are never contended. */
    return -ENOTSUP;
  }
  return on ? -pthread_mutex_lock(m) : -pthread_mutex_unlock(m);
}

/* The path of fd's send (tx) or receive direction: r2s_path_t, or -errno. */
__attribute__((visibility("default"))) int r2s__test_path(int fd, int tx)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  if (!c) return -EBADF;
  r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  int p = R2S_PATH_TCP;
  if (l) r2s__link_info(l, tx ? NULL : &p, tx ? &p : NULL, NULL);
  r2s__conn_put(c);
  return p;
}

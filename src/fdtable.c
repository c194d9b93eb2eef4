/* The fd table: one reserved mapping of connection pointers, indexed by fd. */
#include "fdtable.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "log.h"
#include "proc.h"

r2s_conn_t **r2s__fd_slots;
unsigned r2s__fd_cap;
static unsigned fd_high; /* 1 + the highest fd ever installed; bounds range scans */

/* The largest fd the process can ever get: RLIMIT_NOFILE can be raised at run
 * time up to the hard limit, and root can raise that up to fs.nr_open. */
static unsigned fd_ceiling(void)
{
  unsigned long cap = 0;
  if (r2s__proc_numbers("/proc/sys/fs/nr_open", &cap, 1) != 1) cap = 0;
  struct rlimit rl;
  if (cap == 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0)
    cap = rl.rlim_max == RLIM_INFINITY ? R2S_FD_MAX : (unsigned long)rl.rlim_max;
  if (cap == 0 || cap > R2S_FD_MAX) cap = R2S_FD_MAX;
  return (unsigned)cap;
}

int r2s__fdtable_init(void)
{
  unsigned cap = fd_ceiling();
  /* MAP_NORESERVE: pages exist only where an fd was ever tracked. */
  void *p = mmap(NULL, (size_t)cap * sizeof(r2s_conn_t *), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    r2s__warn("cannot reserve the fd table (%u fds): %s; every socket stays plain TCP", cap, strerror(err));
    return -err;
  }
  r2s__fd_slots = p;
  /* Publish the capacity last: readers check it before touching the slots. */
  __atomic_store_n(&r2s__fd_cap, cap, __ATOMIC_RELEASE);
  return 0;
}

int r2s__fd_install(int fd, r2s_conn_t *c)
{
  if ((unsigned)fd >= __atomic_load_n(&r2s__fd_cap, __ATOMIC_ACQUIRE)) return -EBADF;
  r2s__conn_ref(c);
  __atomic_fetch_add(&c->nfds, 1, __ATOMIC_RELAXED);
  r2s_conn_t *old = __atomic_exchange_n(&r2s__fd_slots[fd], c, __ATOMIC_ACQ_REL);
  unsigned high = __atomic_load_n(&fd_high, __ATOMIC_RELAXED);
  while ((unsigned)fd >= high && !__atomic_compare_exchange_n(&fd_high, &high, (unsigned)fd + 1, true,
                                                              __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  if (old) {
    __atomic_fetch_sub(&old->nfds, 1, __ATOMIC_RELAXED);
    r2s__conn_put(old);
  }
  return 0;
}

r2s_conn_t *r2s__fd_remove(int fd)
{
  if ((unsigned)fd >= __atomic_load_n(&r2s__fd_cap, __ATOMIC_ACQUIRE)) return NULL;
  if (!__atomic_load_n(&r2s__fd_slots[fd], __ATOMIC_RELAXED)) return NULL; /* keep the page clean */
  r2s_conn_t *c = __atomic_exchange_n(&r2s__fd_slots[fd], NULL, __ATOMIC_ACQ_REL);
  if (c) __atomic_fetch_sub(&c->nfds, 1, __ATOMIC_ACQ_REL);
  return c;
}

void r2s__fd_remove_range(unsigned lo, unsigned hi)
{
  unsigned high = __atomic_load_n(&fd_high, __ATOMIC_RELAXED);
  if (high == 0) return;
  if (hi >= high) hi = high - 1;
  for (unsigned fd = lo; fd <= hi && fd < high; fd++) {
    r2s_conn_t *c = r2s__fd_remove((int)fd);
    if (c) r2s__conn_put(c);
  }
}

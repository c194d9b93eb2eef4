/*
 * fdtable.h - from a kernel fd to the shim's connection, without a lock.
 *
 * Contract:
 *  - A direct-indexed array of connection pointers covering every fd the
 *    process can have (the kernel's nr_open, at most R2S_FD_MAX). It is one
 *    anonymous mapping reserved at init: untouched parts cost no memory, so
 *    the table never grows and never moves.
 *  - r2s__fd_peek() is the hot "is this fd one of ours?" test that every
 *    read/write of every file in the process pays: a bounds check and one
 *    acquire load. Before init the capacity is 0, so every fd is "not ours".
 *  - r2s__fd_get() returns the connection with a reference taken, or NULL.
 *    It re-checks the slot after taking the reference, so it never returns a
 *    connection that was closed and recycled under it.
 *  - Writers (install/remove) use atomic exchange; a slot holds one
 *    reference. No lock: nothing here needs a fork handler. The fd number is the kernel's: the shim never invents fds.
 *  - Mutations for one fd are ordered by the kernel call they shadow (the
 *    slot is removed before close(2), installed after accept/dup returns),
 *    so a racing socket() that reuses the number installs after us.
 */
#ifndef R2S_FDTABLE_H
#define R2S_FDTABLE_H

#include <stddef.h>

#include "conn.h"

#define R2S_FD_MAX (1u << 24)

extern r2s_conn_t **r2s__fd_slots;
extern unsigned r2s__fd_cap;

/* Reserves the table; returns 0 or -errno (then the shim tracks nothing). */
int r2s__fdtable_init(void);

static inline r2s_conn_t *r2s__fd_peek(int fd)
{
  if ((unsigned)fd >= __atomic_load_n(&r2s__fd_cap, __ATOMIC_RELAXED)) return NULL;
  return __atomic_load_n(&r2s__fd_slots[fd], __ATOMIC_ACQUIRE);
}

static inline r2s_conn_t *r2s__fd_get(int fd)
{
  for (;;) {
    r2s_conn_t *c = r2s__fd_peek(fd);
    if (!c) return NULL;
    if (!r2s__conn_tryref(c)) return NULL; /* closing: the fd is going away */
    if (__atomic_load_n(&r2s__fd_slots[fd], __ATOMIC_ACQUIRE) == c) return c;
    r2s__conn_put(c); /* the slot changed under us; look again */
  }
}

/* Points fd at c, taking a new reference on c; drops the reference of any
 * connection the slot held before (an fd number the kernel reused). Returns
 * -EBADF if fd is outside the table (c is then simply not tracked there). */
int r2s__fd_install(int fd, r2s_conn_t *c);

/* Empties the slot and returns its reference (the caller puts it), or NULL.
 * c->nfds then says how many fds of this process still refer to it. */
r2s_conn_t *r2s__fd_remove(int fd);

/* Empties the slots lo..hi (inclusive, clamped to the highest fd ever used). */
void r2s__fd_remove_range(unsigned lo, unsigned hi);

#endif

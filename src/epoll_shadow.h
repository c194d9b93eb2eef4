/*
 * epoll_shadow.h - the shim's copy of the registrations an application
 * makes in its epoll sets, kept per epoll fd (epoll_shadow.c), for the
 * waits that report carried connections (epoll_wait.c).
 *
 * Contract:
 *  - A set gets a registry (r2s__epoll_reg) once a tracked TCP socket is
 *    added to it, or once a thread waits on it while the process carries
 *    connections; it goes when the epoll fd is closed, and is emptied when
 *    a new epoll fd takes the number. Entries hold the registration as the
 *    application made it (fd, events, data) and which connection it was
 *    made for (r2s__ep_same_conn): the kernel drops closed sockets from its sets
 *    by itself, and the fd number may belong to a newer connection. The
 *    entries are indexed by fd and by data (epoll_index.h), so that
 *    epoll_ctl and the translation of a kernel event back to its
 *    registration do not walk the set.
 *  - The application's last close of a carried connection takes it out of
 *    every set (r2s__epoll_forget), as the kernel's close would.
 *  - The set's wake-up (r2s_ep_wake_t) ends the sleep of the threads
 *    waiting on the set when a carried connection is added or modified
 *    with its ring already ready; a wait never reports it.
 *  - Lock order: the list of sets (sets_lock in epoll_shadow.c), a set's
 *    registry lock (lock), then a link's locks, only tried. The registry
 *    lock guards the entries, their index, the wake-up and the round; it
 *    is never held across a call that can block.
 */
#ifndef R2S_EPOLL_SHADOW_H
#define R2S_EPOLL_SHADOW_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include "conn.h"

typedef struct r2s_ep_entry_s {
  int fd;
  uint32_t events;
  uint64_t data;
  r2s_conn_t *conn;   /* identity check (r2s__ep_same_conn): the fd number may have been reused */
  uint32_t conn_id;   /* ... and conn's memory, by a newer connection (the pool) */
  bool fired;         /* EPOLLONESHOT reported, until the next MOD */
  unsigned round;     /* the epoll_wait call that last reported it */
  uint8_t et_have;    /* EPOLLET: which of et_gen hold a reported state (bit 0 IN, 1 OUT) */
  uint64_t et_gen[2]; /* EPOLLET: r2s__link_edge_gen when EPOLLIN, EPOLLOUT were last reported */
  unsigned next[2];   /* the index's chains by fd and by data (epoll_index.h) */
  bool active;        /* its fd is on the set's list of active links (epoll_index.h) */
  unsigned walked;    /* the walk of the list that last looked at it */
  int64_t busy_ns;    /* when it was registered or last reported (epoll_wait.c, quiet links) */
} r2s_ep_entry_t;

/* A connection added (or modified) while another thread already sleeps in
 * the kernel on the set was neither looked at nor armed by that wait: bytes
 * in its ring (there already, or coming later without a doorbell, which
 * only an armed connection gets) would leave the waiter asleep until its
 * timeout. Apache's event MPM re-adds each keep-alive connection from a
 * worker thread while its listener thread waits, and waited out its 5 s
 * keep-alive timeout for requests that sat in the ring. So the set gets a
 * wake-up: one end of a socket pair of the shim's (at 512 and up),
 * registered in the set with a random key as its data, made readable by
 * epoll_ctl while a thread waits on the set, and drained by the waiter,
 * which looks at (and arms) the connections again and never reports it. */
typedef struct r2s_ep_wake_s {
  int rd, wr; /* -1 until first needed */
  ino_t rd_ino, wr_ino;
  uint64_t key; /* the data of rd's registration in the set */
} r2s_ep_wake_t;

typedef struct r2s_ep_reg_s {
  pthread_mutex_t lock;
  /* The entries and their index (heads NULL: none; 1 << bits buckets by
   * fd, as many by data), changed only through epoll_index.h; r->lock. */
  r2s_ep_entry_t *v;
  unsigned n, cap;
  unsigned *heads;
  unsigned bits;
  unsigned round;     /* counts epoll_wait calls, to report an entry once per call */
  /* The fds of the entries whose links are active (r2s__link_active), so
   * that a wait looks at those alone, not at a crowd of connections the
   * kernel answers for (epoll_index.h); valid while act_epoch is
   * r2s__link_activations and the list was made less than a second ago
   * (act_ns). carried: an entry's connection may be carried (not in
   * pass-through), as the last full look or a registration since found;
   * if none is, the kernel answers for the whole set. */
  int *act;
  unsigned nact, act_cap, walk;
  bool act_valid, carried;
  unsigned long act_epoch;
  int64_t act_ns;
  r2s_ep_wake_t wake; /* r->lock */
  uint64_t poke;      /* the poke socket registered in the set (poke.h; 0: none), r->lock */
  int waiters;        /* atomic: threads in an epoll wait on the set (r2s__epoll_wait) */
} r2s_ep_reg_t;

/* Whether the entry was made for connection c. The kernel drops a closed
 * socket from its epoll sets by itself, with no EPOLL_CTL_DEL (haproxy
 * relies on that), so an entry can outlive its connection: its fd number
 * and the connection's pooled memory may both belong to a newer one,
 * whose events must not be reported with the old registration's data. */
static inline bool r2s__ep_same_conn(const r2s_ep_entry_t *e, const r2s_conn_t *c)
{
  return c == e->conn && c->id == e->conn_id;
}

/* The registry of epfd; with create, made if it has none. NULL: none (or
 * no memory, or epfd out of the fd table's range). */
r2s_ep_reg_t *r2s__epoll_reg(int epfd, bool create);
/* Registers the poke (poke.h) in the set, under its wake-up's key, so
 * that a wait on it may sleep without a slice; false if it cannot be had.
 * r->lock held. */
bool r2s__epoll_join_poke(r2s_ep_reg_t *r, int epfd);
/* Whether ev is the set's wake-up (its own, or the poke); if so, the
 * set's own is drained. r->lock held. */
bool r2s__epoll_is_wake(r2s_ep_reg_t *r, const struct epoll_event *ev);
/* The kernel's events for epfd less the set's wake-up (a wait that was
 * not the shim's when it began can still be woken by it). */
int r2s__epoll_drop_wakes(r2s_ep_reg_t *r, struct epoll_event *ev, int n);

#endif

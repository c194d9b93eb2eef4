/*
 * statseg.h - the process's live-statistics segment, read by r2sock-stat.
 *
 * Contract (statseg_layout.h is the byte layout):
 *  - Made lazily, by the first connection or listener the process has
 *    (most processes that load the shim never touch a socket), as
 *    /dev/shm/r2s-stat-<pid>, mode 0600; removed at exit by the destructor,
 *    and by r2sock-stat when it finds the process dead. R2SOCK_STATSEG=0:
 *    no segment, every call here returns at once.
 *  - From its creation on, the process counters of stats.h live in the
 *    segment's header (r2s__stats_live points there), so r2sock-stat sees
 *    them without any copying.
 *  - A connection that gets a slot keeps its byte and wait counters in it
 *    (c->ctr points into the slot): the data path adds to them exactly as
 *    before, one relaxed atomic add, no system call. Without a slot (no
 *    segment, or all R2S_STATSEG_SLOTS taken: counted in the header's
 *    overflow) they stay in the connection (c->own).
 *  - The reason shown for a connection on TCP is the shim's r2s_reason_t
 *    name once its path is settled, "negotiating" before.
 *  - Slot identity changes (open, path or reason, close) are slow-path events
 *    written under the slot's seqlock. Until a connection's path is settled
 *    (plain TCP for good, or both directions in rings), each counted I/O
 *    calls r2s__statseg_refresh, which compares a few loads with what was
 *    published and writes only on a change.
 *  - After fork() the child forgets the parent's segment (it never writes
 *    into it). It publishes an inherited connection in its own segment when
 *    it first moves bytes on it (a child that only execs makes nothing);
 *    inherited listeners are not listed in the child.
 */
#ifndef R2S_STATSEG_H
#define R2S_STATSEG_H

#include <pthread.h>

#include "statseg_layout.h"

typedef struct r2s_conn_s r2s_conn_t;

/* At start-up: a segment under our pid is a leftover of the image this
 * process exec'd from; it is removed. */
void r2s__statseg_init(void);

/* c is established (or listening, or adopted): give it a slot and publish. */
void r2s__statseg_open(r2s_conn_t *c);

/* c's path or reason may have changed: republish if it did. */
void r2s__statseg_refresh(r2s_conn_t *c);

/* c ends (its counters were folded): free its slot; c->ctr is c->own again. */
void r2s__statseg_close(r2s_conn_t *c);

/* The segment's lock itself, for the test that forks while another thread
 * holds it (tests/unit/hold_lock.c); the shim never calls it. */
pthread_mutex_t *r2s__statseg_lock(void);

/* pthread_atfork handlers; the child's forgets the parent's segment (the
 * connections are republished by conn.c's child handler). */
void r2s__statseg_fork_prepare(void);
void r2s__statseg_fork_parent(void);
void r2s__statseg_fork_child(void);

/* At exit: remove the segment's name (and sweep the dead's); no segment is
 * made after this. */
void r2s__statseg_exit(void);

/* The process is about to confine its system calls (sandbox.h): the
 * segment's name goes now; nothing is listed or made from then on. */
void r2s__statseg_sandbox(void);

#endif

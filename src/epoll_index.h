/*
 * epoll_index.h - the entries of an epoll set's registry (epoll_shadow.h)
 * and their index by fd and by data (epoll_index.c): epoll_ctl's shadow
 * finds a registration by its fd, the translation of a kernel event finds
 * it by the data the event carries, each in expected constant time
 * however many connections the set holds.
 *
 * Contract:
 *  - Everything here runs under the registry's lock (r->lock), which
 *    guards the entries and their index together; nothing here blocks or
 *    takes a lock.
 *  - The entries are r->v[0..n), in no order the application can see: a
 *    removal moves the last entry into the hole. A set holds at most one
 *    entry per fd (the shadow of EPOLL_CTL_ADD replaces an entry at the
 *    same number), which r2s__ep_find_fd finds. Several entries may share
 *    a data (dup'd fds of one connection, or an application's own
 *    choice); r2s__ep_find_data finds the one at the lowest position, the
 *    one a walk of r->v from the start finds first.
 *  - The index is two chained hash tables of positions (r2s_ep_entry_t's
 *    next), by fd and by data, each with as many buckets as r->v has
 *    room. Entries that share a data share a chain: looking one up, or
 *    taking one out, walks them all (an application that gives many fds
 *    one data makes those a walk of the set). The index grows and shrinks
 *    with r->v and is freed with it (r2s__ep_clear). With no memory for a
 *    bigger index the old one stays (longer chains); with none at all
 *    (r->heads NULL) the lookups walk r->v: the same answers either way,
 *    only slower, and the next growth tries again. With no memory for the
 *    entry itself, r2s__ep_add makes none: the kernel's registration
 *    stands alone, and waits report the kernel's answer for it.
 *  - The set also keeps the fds of its active entries (r->act,
 *    r2s__ep_act_add), freed with the rest by r2s__ep_clear.
 *  - r2s__ep_reindex relinks every entry into the index's own buckets,
 *    with no allocation: for the child of a fork, whose parent may have
 *    been in the middle of a change.
 */
#ifndef R2S_EPOLL_INDEX_H
#define R2S_EPOLL_INDEX_H

#include <stdint.h>

#include "epoll_shadow.h"

/* The entry for fd, or NULL. */
r2s_ep_entry_t *r2s__ep_find_fd(r2s_ep_reg_t *r, int fd);
/* The entry with this data at the lowest position, or NULL. */
r2s_ep_entry_t *r2s__ep_find_data(r2s_ep_reg_t *r, uint64_t data);
/* A new entry holding *e (whose fd has none), or NULL with no memory. */
r2s_ep_entry_t *r2s__ep_add(r2s_ep_reg_t *r, const r2s_ep_entry_t *e);
/* Entry at now holds *e, for the same fd, at the same position. */
void r2s__ep_set(r2s_ep_reg_t *r, r2s_ep_entry_t *at, const r2s_ep_entry_t *e);
/* Takes the entry at out of the set; the last entry takes its place. */
void r2s__ep_remove(r2s_ep_reg_t *r, r2s_ep_entry_t *at);
/* Empties the set and frees its entries and index. */
void r2s__ep_clear(r2s_ep_reg_t *r);
void r2s__ep_reindex(r2s_ep_reg_t *r);
/* Puts e's fd on the set's list of active links (r->act), unless it is
 * there; false with no memory for it (the list is then not valid, and
 * the next wait looks at every entry). An fd stays on the list until a
 * walk of it finds no entry for it, or one that is not active (a new
 * registration at the number starts inactive), and is dropped then. */
bool r2s__ep_act_add(r2s_ep_reg_t *r, r2s_ep_entry_t *e);
/* The bucket of key among 1 << bits (4 to 32), for the unit test's
 * collisions. */
unsigned r2s__ep_bucket(uint64_t key, unsigned bits);

#endif

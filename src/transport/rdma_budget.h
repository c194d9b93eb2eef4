/*
 * rdma_budget.h - the process's budget of registered memory for its RDMA
 * connections (R2SOCK_RDMA_MEMORY), and the ring sizes that fit in it.
 *
 * Contract:
 *  - What counts is what a connection registers for its rings
 *    (r2s__rdma_conn_cost): its receive ring (control page and data), the
 *    page of its credit line, and its copy of the peer's ring. The offer
 *    reserves them with the largest copy it may make (its FIT offer,
 *    rdma_fit.h); connect gives back what the peer's ring leaves of that
 *    copy unused; the state's end gives back the rest. The queues the
 *    driver makes for a queue pair are not counted.
 *  - The budget (r2s__rdma_budget_of): R2SOCK_RDMA_MEMORY if set, else
 *    R2S_RDMA_BUDGET_AUTO; in either case at most three quarters of
 *    RLIMIT_MEMLOCK where this process may pin only that much (the kernel
 *    refuses a registration beyond the limit; the quarter is left for the
 *    queues, which some drivers pin too).
 *  - Under R2SOCK_RING_SIZE=auto a ring (and the copy of the peer's ring
 *    the connection agrees to make) is halved until both fit in what is
 *    left, down to R2S_RDMA_RING_LEAST (r2s__rdma_ring_in_budget); a size
 *    that is set is offered as it is or not at all. A connection that
 *    finds no room stays on TCP.
 *  - r2s__rdma_budget_take and _give are lock-free (one atomic word). A
 *    fork child's budget starts empty; a state made before the fork is
 *    the parent's and gives nothing back in the child (rdma_setup.c).
 *  - The arithmetic is inline and device-free, for the unit tests
 *    (tests/unit/test_rdma_budget.c).
 */
#ifndef R2S_TRANSPORT_RDMA_BUDGET_H
#define R2S_TRANSPORT_RDMA_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "../ring.h"

/* The budget where none is set and the memlock limit allows it: about
 * 1,900 connections on 64 KiB rings, or 63 on the usual 2 MiB. */
#define R2S_RDMA_BUDGET_AUTO (256ull << 20)
/* The smallest ring the budget shrinks an auto size to. */
#define R2S_RDMA_RING_LEAST (64u << 10)
/* The page of a connection's credit line (registered on its own). */
#define R2S_RDMA_CREDIT_PAGE 4096u

/* Registered bytes of a connection with a ring of `ring` bytes that copies
 * up to `copy` bytes of its peer's. */
static inline uint64_t r2s__rdma_conn_cost(uint64_t ring, uint64_t copy)
{
  return R2S_RING_CTL_SIZE + ring + R2S_RDMA_CREDIT_PAGE + copy;
}

/* The budget: `opt` (R2SOCK_RDMA_MEMORY, 0 for auto) or the auto size,
 * within three quarters of `memlock` (0: pinning is unlimited). */
static inline uint64_t r2s__rdma_budget_of(uint64_t opt, uint64_t memlock)
{
  uint64_t b = opt ? opt : R2S_RDMA_BUDGET_AUTO;
  uint64_t cap = memlock / 4 * 3;
  return memlock && cap < b ? cap : b;
}

/* The ring an auto-sized connection offers when `room` bytes of the budget
 * are left: `want` (a power of two), halved until the ring and a copy of a
 * peer ring as large fit, not below `least`; 0 when even that does not. */
static inline uint64_t r2s__rdma_ring_in_budget(uint64_t want, uint64_t least, uint64_t room)
{
  for (uint64_t s = want; s >= least && s; s >>= 1)
    if (r2s__rdma_conn_cost(s, s) <= room) return s;
  return 0;
}

/* This process's budget (options and limits read once). */
uint64_t r2s__rdma_budget(void);
/* Bytes of the budget not reserved now (a hint: take() decides). */
uint64_t r2s__rdma_budget_room(void);
/* Reserves n bytes: false, reserving nothing, if they do not fit. */
bool r2s__rdma_budget_take(uint64_t n);
void r2s__rdma_budget_give(uint64_t n);
/* This process may pin memory without bound: no memlock limit, or
 * CAP_IPC_LOCK (root), which a registration's pinning honours instead of
 * the limit. */
bool r2s__rdma_pin_unlimited(void);

#endif

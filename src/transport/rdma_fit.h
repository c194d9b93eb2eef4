/*
 * rdma_fit.h - how large each ring of an RDMA connection is: what an end
 * offers, what it agrees to copy, and what both ends then use
 * (docs/protocol.md, "RDMA ring fit"). Arithmetic only, so that it can be
 * tested without a device (tests/unit/test_rdma_fit.c).
 *
 * Contract:
 *  - A producer keeps a registered copy of the peer's ring (rdma_setup.c),
 *    so a ring costs pinned memory at both ends. Each end offers its receive
 *    ring and, in a FIT offer, the largest peer ring it will copy
 *    (r2s__rdma_copy_max): as large as its own where pinned memory is
 *    limited, up to R2S_RDMA_PEER_RING_MAX where it is not.
 *  - When both ends sent a FIT offer, each ring is used up to the smaller
 *    of its size and its producer's copy limit; both ends compute the same
 *    figure from the two handshakes, before the peer can write. The owner
 *    has registered the whole ring and leaves the rest unused.
 *  - When either did not (an older peer), a ring is used whole, and the
 *    producer declines one larger than R2S_RDMA_PEER_RING_MAX and its own
 *    ring (r2s__rdma_ring_used returns 0): the connection stays on TCP.
 *  - Every size here is a power of two from 4 KiB to R2S_RDMA_RING_MAX,
 *    so the smaller of two of them is one too.
 */
#ifndef R2S_TRANSPORT_RDMA_FIT_H
#define R2S_TRANSPORT_RDMA_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include "rdma_imm.h"

/* The largest peer ring an end copies without a FIT offer, unless its own
 * ring is larger. */
#define R2S_RDMA_PEER_RING_MAX (16ull << 20)

/* Auto ring sizes: R2S_RING_AUTO_RDMA (options.h) by default; this for a
 * process's first R2S_RDMA_WIDE_CONNS connections where pinned memory is
 * unlimited. Two emulated hosts: iperf3 +10 % and iperf2 +18 % at the
 * medians with 8 MiB rings against 2 MiB (docs/rdma.md, "Ring sizes"). */
#define R2S_RDMA_RING_WIDE  (8ull << 20)
#define R2S_RDMA_WIDE_CONNS 8u

static inline bool r2s__rdma_ring_size_ok(uint64_t size)
{
  return size >= 4096 && size <= R2S_RDMA_RING_MAX && (size & (size - 1)) == 0;
}

/* The largest peer ring an end with a ring of `own` bytes copies. */
static inline uint64_t r2s__rdma_copy_max(uint64_t own, bool pin_unlimited)
{
  if (!pin_unlimited || own > R2S_RDMA_PEER_RING_MAX) return own;
  return R2S_RDMA_PEER_RING_MAX;
}

/* What this end uses of its own ring of `ring` bytes; peer_copy_max: the
 * peer's FIT offer, 0 if it sent none. */
static inline uint64_t r2s__rdma_own_used(uint64_t ring, uint64_t peer_copy_max)
{
  return peer_copy_max && peer_copy_max < ring ? peer_copy_max : ring;
}

/* What this end (ring `own`, FIT offer `copy_max`) copies of the peer's
 * ring of `peer_ring` bytes; peer_fit: the peer sent a FIT offer. 0: it
 * declines the ring. */
static inline uint64_t r2s__rdma_peer_used(uint64_t peer_ring, bool peer_fit, uint64_t own, uint64_t copy_max)
{
  if (peer_fit) return peer_ring < copy_max ? peer_ring : copy_max;
  if (peer_ring <= R2S_RDMA_PEER_RING_MAX || peer_ring <= own) return peer_ring;
  return 0;
}

#endif

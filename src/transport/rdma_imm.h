/*
 * rdma_imm.h - the tail a data immediate carries (docs/protocol.md, "RDMA
 * data immediates"). Arithmetic only, so that it can be tested without a
 * device (tests/unit/test_rdma_imm.c).
 *
 * Contract:
 *  - A data write with immediate carries its new tail's low 31 bits
 *    (r2s__imm_of_tail). The consumer rebuilds the 64-bit tail forward
 *    from the last one it learnt (r2s__imm_tail_after), which is exact as
 *    long as two consecutive immediates' tails are less than 2^31 apart.
 *  - Every data write to a peer that takes immediates carries one (a
 *    producer short of the peer's receives waits for them,
 *    rdma_producer.c), and one write moves at most a ring, which is at
 *    most R2S_RDMA_RING_MAX: consecutive immediates are at most that far
 *    apart.
 */
#ifndef R2S_TRANSPORT_RDMA_IMM_H
#define R2S_TRANSPORT_RDMA_IMM_H

#include <stdint.h>

#define R2S_IMM_TAIL_MASK  0x7fffffffu
#define R2S_RDMA_RING_MAX  (1ull << 30) /* the largest ring either end accepts */

_Static_assert(R2S_RDMA_RING_MAX < (1ull << 31), "two data immediates must stay less than 2^31 bytes apart");

static inline uint32_t r2s__imm_of_tail(uint64_t tail)
{
  return (uint32_t)tail & R2S_IMM_TAIL_MASK;
}

/* The tail an immediate says, given the last tail learnt from one. */
static inline uint64_t r2s__imm_tail_after(uint64_t last, uint32_t imm)
{
  return last + ((imm - (uint32_t)last) & R2S_IMM_TAIL_MASK);
}

#endif

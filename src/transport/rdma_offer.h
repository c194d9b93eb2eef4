/*
 * rdma_offer.h - the RDMA transport's HANDSHAKE offer (rdma_setup.c): the
 * queue pair and the registered ring a peer writes into.
 *
 * Contract:
 *  - r2s__rdma_offer_put adds the offer (kind R2S_OFFER_RDMA) to a
 *    handshake, and, when copy_max is set, the FIT offer beside it
 *    (R2S_OFFER_RDMA_FIT: the largest peer ring this end copies,
 *    transport/rdma_fit.h), which an older peer skips as unknown.
 *  - r2s__rdma_offer_get reads them from a peer's handshake: 1 with *o
 *    filled (copy_max 0 when no FIT offer came), 0 when there is no RDMA
 *    offer, -EPROTO when either is malformed (a wrong length, a FIT of 0).
 *    A FIT offer alone means nothing and is ignored.
 *  - Exposed for the tests and fuzzers that speak the transport as a peer
 *    would; the link itself never looks inside an offer.
 */
#ifndef R2S_TRANSPORT_RDMA_OFFER_H
#define R2S_TRANSPORT_RDMA_OFFER_H

#include <stdint.h>

#include "../frame.h"

typedef struct r2s_offer_rdma_s {
  uint32_t qpn, psn;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t mtu; /* enum ibv_mtu */
  uint64_t ring_addr, ring_size;
  uint32_t ring_rkey;
  uint64_t credit_addr;
  uint32_t credit_rkey;
  uint64_t copy_max; /* from the FIT offer; 0: none was sent */
} r2s_offer_rdma_t;

int r2s__rdma_offer_put(r2s_handshake_t *h, const r2s_offer_rdma_t *o);
int r2s__rdma_offer_get(const r2s_handshake_t *h, r2s_offer_rdma_t *o);

#endif

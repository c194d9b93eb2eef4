/* The RDMA transport's HANDSHAKE offers on the wire (rdma_offer.h). The
 * RDMA offer: qpn u32, psn u32, gid 16 bytes, lid u16, mtu u8, ring
 * address u64, ring size u64, ring rkey u32, credit address u64, credit
 * rkey u32. The FIT offer: copy_max u64, never 0. A peer chose these
 * bytes: nothing is trusted. */
#include "rdma_offer.h"

#include <errno.h>
#include <string.h>

#include "../wire.h"

#define BODY     (4 + 4 + 16 + 2 + 1 + 8 + 8 + 4 + 8 + 4)
#define FIT_BODY 8
_Static_assert(BODY <= R2S_OFFER_BODY_MAX, "the offer fits a handshake's slot");

int r2s__rdma_offer_put(r2s_handshake_t *h, const r2s_offer_rdma_t *o)
{
  uint8_t q[BODY];
  r2s__put32(q, o->qpn), r2s__put32(q + 4, o->psn);
  memcpy(q + 8, o->gid, 16);
  r2s__put16(q + 24, o->lid);
  q[26] = o->mtu;
  r2s__put64(q + 27, o->ring_addr), r2s__put64(q + 35, o->ring_size), r2s__put32(q + 43, o->ring_rkey);
  r2s__put64(q + 47, o->credit_addr), r2s__put32(q + 55, o->credit_rkey);
  int rc = r2s__handshake_add_offer(h, R2S_OFFER_RDMA, q, sizeof q);
  if (rc < 0 || !o->copy_max) return rc;
  uint8_t f[FIT_BODY];
  r2s__put64(f, o->copy_max);
  return r2s__handshake_add_offer(h, R2S_OFFER_RDMA_FIT, f, sizeof f);
}

int r2s__rdma_offer_get(const r2s_handshake_t *h, r2s_offer_rdma_t *o)
{
  size_t len, flen;
  const uint8_t *q = r2s__handshake_offer(h, R2S_OFFER_RDMA, &len);
  const uint8_t *f = r2s__handshake_offer(h, R2S_OFFER_RDMA_FIT, &flen);
  /* 0 would read as "none sent": a FIT offer of 0 is a lie. */
  if (f && (flen != FIT_BODY || r2s__get64(f) == 0)) return -EPROTO;
  if (!q) return 0;
  if (len != BODY) return -EPROTO;
  memset(o, 0, sizeof *o);
  o->qpn = r2s__get32(q), o->psn = r2s__get32(q + 4);
  memcpy(o->gid, q + 8, 16);
  o->lid = r2s__get16(q + 24);
  o->mtu = q[26];
  o->ring_addr = r2s__get64(q + 27), o->ring_size = r2s__get64(q + 35), o->ring_rkey = r2s__get32(q + 43);
  o->credit_addr = r2s__get64(q + 47), o->credit_rkey = r2s__get32(q + 55);
  o->copy_max = f ? r2s__get64(f) : 0;
  return 1;
}

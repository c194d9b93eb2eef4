/*
 * shm_offer.h - the shared-memory transport's HANDSHAKE offer (shm.c):
 * the name of the receive ring's segment and its size.
 *
 * Contract:
 *  - r2s__shm_offer_put adds the offer (kind R2S_OFFER_SHM) to a
 *    handshake; r2s__shm_offer_get reads it back from a peer's: 1 with *o
 *    filled, 0 when there is none, -EPROTO when it is malformed (a wrong
 *    length, or a name that is not one shm_open may be given: it must be
 *    terminated, start with '/', hold no other '/', and not be "/"). The
 *    link resets a connection whose peer sent a malformed offer
 *    (transport.h, check).
 *  - Exposed for the tests and fuzzers that speak the transport as a peer
 *    would; the link itself never looks inside an offer.
 */
#ifndef R2S_TRANSPORT_SHM_OFFER_H
#define R2S_TRANSPORT_SHM_OFFER_H

#include <stdint.h>

#include "../frame.h"

#define R2S_SHM_NAME_MAX 64

typedef struct r2s_offer_shm_s {
  char name[R2S_SHM_NAME_MAX]; /* NUL-terminated shm_open name, "/r2s-..." */
  uint64_t ring_size;          /* data bytes of the offered receive ring */
} r2s_offer_shm_t;

int r2s__shm_offer_put(r2s_handshake_t *h, const r2s_offer_shm_t *o);
int r2s__shm_offer_get(const r2s_handshake_t *h, r2s_offer_shm_t *o);

#endif

/*
 * liar_rdma.h - the verbs side of lying_peer's RDMA cases: one RC queue pair
 * set up the way the shim's RDMA transport expects its peer's to be
 * (docs/rdma.md), so that lying_peer can speak the protocol honestly and
 * then lie through RDMA itself.
 *
 * Contract:
 *  - lr_open() finds the device, port and GID of the socket's local address
 *    (a RoCE v2 entry first, as the shim does), makes our receive ring
 *    (control page + ring_size bytes, remote write only) and the credit line
 *    the peer writes into (64 bytes inside *out_ctl, remote write only), and
 *    posts receives for the peer's sleep announcements. NULL on failure,
 *    with the reason on stderr.
 *  - lr_offer() describes both in an offer; lr_connect() takes the queue
 *    pair to RTS towards the peer's offer and keeps its ring and credit
 *    line; lr_attach_out() makes the local copy of the peer's ring data.
 *  - Every post waits for its own completion (bounded) and returns its
 *    status (IBV_WC_SUCCESS or the error), or -1 when it could not be
 *    posted or did not complete in time. After an error the queue pair is
 *    dead: one lie per connection.
 *  - lr_reap_recvs() reposts the receives the peer's write-with-immediate
 *    consumed, so that the peer never waits on receiver-not-ready.
 */
#ifndef LIAR_RDMA_H
#define LIAR_RDMA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "frame.h"
#include "transport/rdma_offer.h"

typedef struct liar_rdma_s liar_rdma_t;

/* the peer's regions, as its HANDSHAKE gave them */
typedef struct lr_peer_s {
  uint64_t ring, credit, ring_size;
  uint32_t ring_rkey, credit_rkey;
} lr_peer_t;

liar_rdma_t *lr_open(int fd, uint64_t ring_size, uint8_t **in_mem, uint8_t **out_ctl);
void lr_offer(const liar_rdma_t *lr, r2s_offer_rdma_t *o);
/* Our FIT offer (0: none, the default): lr_connect then uses the peer's
 * ring only up to it, if the peer sent one too (transport/rdma_fit.h). */
void lr_fit(liar_rdma_t *lr, uint64_t copy_max);
int lr_connect(liar_rdma_t *lr, const r2s_offer_rdma_t *peer);
int lr_attach_out(liar_rdma_t *lr, uint8_t **out_data);
const lr_peer_t *lr_peer(const liar_rdma_t *lr);

/* RDMA WRITE of len bytes at local (from registered memory, or inline when
 * small) to raddr/rkey; with imm >= 0 a write with that immediate. */
int lr_write(liar_rdma_t *lr, const void *local, uint32_t len, uint64_t raddr, uint32_t rkey, int64_t imm);
/* Bytes [from, to) of the local copy of the peer's ring to the same offsets
 * there, then the tail `to`: what the shim's producer does. */
int lr_put(liar_rdma_t *lr, uint64_t from, uint64_t to);
/* RDMA READ of len bytes of the peer's memory into a local buffer. */
int lr_read(liar_rdma_t *lr, void *local, uint32_t len, uint64_t raddr, uint32_t rkey);
/* A SEND of len bytes (the shim posts receives without buffers). */
int lr_send(liar_rdma_t *lr, const void *local, uint32_t len);
int lr_reap_recvs(liar_rdma_t *lr);
const char *lr_status_str(int status);
/* A completion status that says the peer refused the access: a remote
 * access error, or (read_ok) an invalid request, which is what a queue
 * pair that allows no remote reads answers to one. */
bool lr_refused(int status, bool read_ok);

#endif

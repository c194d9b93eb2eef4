/* The producer's side of an RDMA connection: the room it may write into
 * (the peer's ring, the send queue's slots, the peer's receives for data
 * immediates), the RDMA writes of its bytes and tail, its sleep
 * announcement and its close (rdma_conn.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "../lockdebug.h"
#include "../log.h"
#include "rdma_conn.h"
#include "rdma_imm.h"

/* How far a producer at `from` may write: without receives to spare at
 * the peer, no further than R2S_IMM_SPAN past its last immediate
 * (post_data_locked may then overdraw the reserve by one). Only the
 * producer's own thread moves imm_last_tail. */
static uint64_t imm_span_left(r2s_tp_state_t *st, uint64_t from)
{
  uint64_t left = r2s__imm_span_left(st->imm_last_tail, from);
  if (left >= st->peer.size) return UINT64_MAX; /* far from it: no need to look */
  r2s__lock(&st->post_lock);
  bool room = rd_imm_room_locked(st);
  r2s__unlock(&st->post_lock);
  return room ? UINT64_MAX : left;
}

/* The send queue had no slots for a data write (sq_full): are there now?
 * Clears the flag once there are. */
static bool sq_freed(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->sq_full, __ATOMIC_SEQ_CST)) return true;
  r2s__lock(&st->post_lock);
  bool room = rd_sq_room_locked(st, 3, SQ_CTRL_RESERVE);
  if (room) __atomic_store_n(&st->sq_full, 0, __ATOMIC_SEQ_CST);
  r2s__unlock(&st->post_lock);
  return room;
}

ssize_t rd_space(r2s_tp_state_t *st)
{
  if (state_error(st)) return rd_stuck(st);
  if (__atomic_load_n(&peer_cline(st)->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  /* A full send queue is a full ring to the writer: it waits (and is
   * woken) the same way (rd_sleep_tx). */
  if (!sq_freed(st)) return 0;
  ssize_t n = r2s__ring_space(&st->peer);
  if (n <= 0 || !peer_imm(st)) return n;
  uint64_t left = imm_span_left(st, st->peer.tail);
  return left < (uint64_t)n ? (ssize_t)left : n;
}

/* RDMA-writes ring bytes [from, to) of our copy to the same offsets of the
 * peer's ring, the last write carrying the new tail as its immediate if
 * the peer has receives to spare (or must have one, see rdma_imm.h), else
 * followed by a write of the tail; post_lock held. */
static int post_data_locked(r2s_tp_state_t *st, uint64_t from, uint64_t to)
{
  struct ibv_send_wr wr[3];
  struct ibv_sge sge[3];
  unsigned k = 0;
  if (!rd_sq_room_locked(st, 3, SQ_CTRL_RESERVE)) {
    __atomic_store_n(&st->sq_full, 1, __ATOMIC_SEQ_CST);
    int err = state_error(st);
    return err ? err : -EAGAIN;
  }
  for (uint64_t pos = from; pos < to; k++) {
    uint64_t off = pos & st->peer.mask, len = to - pos;
    if (len > st->peer.size - off) len = st->peer.size - off;
    memset(&wr[k], 0, sizeof wr[k]);
    sge[k] = (struct ibv_sge){.addr = (uintptr_t)(st->mdata + off), .length = (uint32_t)len,
                              .lkey = st->mdata_mr->lkey};
    wr[k].opcode = IBV_WR_RDMA_WRITE;
    wr[k].sg_list = &sge[k];
    wr[k].num_sge = 1;
    wr[k].send_flags = len <= st->max_inline ? IBV_SEND_INLINE : 0;
    wr[k].wr.rdma.remote_addr = st->r_ring + R2S_RING_CTL_SIZE + off;
    wr[k].wr.rdma.rkey = st->r_rkey;
    pos += len;
  }
  if (peer_imm(st) && (rd_imm_room_locked(st) || to - st->imm_last_tail > R2S_IMM_SPAN)) {
    wr[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[k - 1].imm_data = htonl(r2s__imm_of_tail(to));
    st->imm_posted++;
    st->imm_last_tail = to;
    return rd_post_locked(st, wr, k, false);
  }
  if (peer_imm(st) && !st->imm_fell_back) { /* once: a stream of small writes outran the peer's reports */
    st->imm_fell_back = true;
    r2s__debug("RDMA: the peer may be short of receives (%u of %u in use): tail words until it reports",
               st->imm_posted - st->imm_acked, RQ_DEPTH);
  }
  /* Inline, so the value is taken now: a later put must not change the
   * tail this request carries before its data is written. */
  uint64_t tail = to;
  rd_inline_write(&wr[k], &sge[k], &tail, 8, st->r_ring + OFF_TAIL, st->r_rkey);
  return rd_post_locked(st, wr, k + 1, false);
}

ssize_t rd_put(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max)
{
  if (state_error(st)) return rd_stuck(st);
  if (__atomic_load_n(&peer_cline(st)->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  uint64_t from = st->peer.tail;
  if (peer_imm(st)) {
    uint64_t left = imm_span_left(st, from);
    if (left < max) max = (size_t)left;
    if (max == 0) return 0;
  }
  if (!sq_freed(st)) return 0;
  ssize_t n = r2s__ring_put(&st->peer, iov, cnt, skip, max);
  if (n <= 0) return n;
  r2s__lock(&st->post_lock);
  int rc = post_data_locked(st, from, st->peer.tail);
  r2s__unlock(&st->post_lock);
  if (rc == -EAGAIN) {
    /* No send slots after all (control writes took them): the bytes are
     * taken back from our copy, which nobody else reads, and the caller
     * hears of a full ring (0). */
    st->peer.tail = from;
    __atomic_store_n(&st->peer.ctl->tail, from, __ATOMIC_SEQ_CST);
    return 0;
  }
  if (rc < 0) {
    /* Posted or not, the bytes are in our copy, from which a failover
     * resends what the peer lacks (unacked): they count as put. */
    if (rc == -ENOLINK) return n;
    return rc;
  }
  /* Before the caller looks at armed_rx (take_peer_rx_sleeper): the
   * progress thread arms, then reads this (Dekker, within the process). */
  __atomic_store_n(&st->tx_posted, st->peer.tail, __ATOMIC_SEQ_CST);
  return n;
}

/* The head is the last credit the peer's consumer wrote into our credit
 * line before our queue pair stopped. */
int rd_unacked(r2s_tp_state_t *st, uint64_t *from, struct iovec iov[2])
{
  *from = 0;
  if (!st->attached) return 0;
  if (r2s__ring_space(&st->peer) < 0) return -EPROTO;
  *from = st->peer.head;
  return r2s__ring_unacked(&st->peer, *from, iov);
}

uint64_t rd_produced(r2s_tp_state_t *st)
{
  return st->attached ? st->peer.tail : 0;
}

bool rd_take_peer_rx_sleeper(r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->armed_rx, __ATOMIC_SEQ_CST) && __atomic_exchange_n(&st->armed_rx, 0, __ATOMIC_SEQ_CST);
}

/* A writer about to sleep tells the peer the head it saw; the peer's
 * progress thread rings once it has sent a credit beyond it. A writer
 * whose send queue is full (sq_full) waits for the device, not for the
 * peer's reader, and nothing of ours can wake it (it sleeps on the TCP
 * socket, which only the peer can make readable): it asks the peer to
 * ring at once (SLEEP_AT_RING_NOW). The announcement goes behind every
 * write of ours in the queue, so by the time the peer hears it, it has
 * acknowledged them all and our slots are free or about to be; a writer
 * that still finds none announces again. */
void rd_sleep_tx(r2s_tp_state_t *st, bool on)
{
  if (!on || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  uint64_t seen = __atomic_load_n(&st->sq_full, __ATOMIC_SEQ_CST)
                      ? SLEEP_AT_RING_NOW
                      : __atomic_load_n(&peer_cline(st)->head, __ATOMIC_ACQUIRE);
  r2s__lock(&st->post_lock);
  (void)rd_announce_locked(st, seen, st->r_ring + OFF_PSLEEP, st->r_rkey, IMM_TX_SLEEP);
  r2s__unlock(&st->post_lock);
}

void rd_close_tx(r2s_tp_state_t *st)
{
  if (!st->attached || state_error(st)) return;
  static const uint32_t one = 1;
  /* With data immediates the tail word goes first: a reader that sees
   * producer_closed must find every byte without waiting for a receive
   * completion (one the device has not yet produced would read as EOF). */
  uint64_t tail = st->peer.tail;
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  unsigned n = 0;
  if (peer_imm(st)) rd_inline_write(&wr[n], &sge[n], &tail, 8, st->r_ring + OFF_TAIL, st->r_rkey), n++;
  rd_inline_write(&wr[n], &sge[n], &one, 4, st->r_ring + OFF_PCLOSED, st->r_rkey), n++;
  r2s__lock(&st->post_lock);
  /* A full queue: the flush, which waits for slots, posts it. */
  if (rd_post_locked(st, wr, n, false) == -EAGAIN) st->close_owed = 1;
  r2s__unlock(&st->post_lock);
}

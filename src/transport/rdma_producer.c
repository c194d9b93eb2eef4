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

/* May the next data write carry an immediate (the peer has receives to
 * spare)? Once it may not, imm_short says so until the peer's report of
 * reposted receives comes: the check takes post_lock only then. */
static bool imm_room(r2s_tp_state_t *st)
{
  if (!peer_imm(st) || !__atomic_load_n(&st->imm_short, __ATOMIC_SEQ_CST)) return true;
  r2s__lock(&st->post_lock);
  bool room = rd_imm_room_locked(st);
  if (room) __atomic_store_n(&st->imm_short, 0, __ATOMIC_SEQ_CST);
  r2s__unlock(&st->post_lock);
  return room;
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
  if (!sq_freed(st) || !imm_room(st)) return 0;
  return r2s__ring_space(&st->peer);
}

/* RDMA-writes ring bytes [from, to) of our copy to the same offsets of the
 * peer's ring; post_lock held. To a peer that takes data immediates the
 * last write carries the new tail as its immediate, which is all the peer
 * learns the tail from: only a completion says that the data before it
 * was placed (docs/rdma.md). Once half the peer's receives may be in use
 * the write asks for a solicited completion, so that the peer's progress
 * thread reposts them and reports before the producer runs short; short
 * of them after all, it waits (-EAGAIN, imm_short). Any other peer gets
 * the data then a write of the tail, and relies on their order. */
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
  if (peer_imm(st) && !rd_imm_room_locked(st)) {
    __atomic_store_n(&st->imm_short, 1, __ATOMIC_SEQ_CST);
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
  if (peer_imm(st)) {
    wr[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[k - 1].imm_data = htonl(r2s__imm_of_tail(to));
    if (st->imm_posted - st->imm_acked >= IMM_SOLICIT) wr[k - 1].send_flags |= IBV_SEND_SOLICITED;
    st->imm_posted++;
    int rc = rd_post_locked(st, wr, k, false);
    if (rc == 0 && !rd_imm_room_locked(st)) __atomic_store_n(&st->imm_short, 1, __ATOMIC_SEQ_CST);
    return rc;
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
  if (!sq_freed(st) || !imm_room(st)) return 0;
  ssize_t n = r2s__ring_put(&st->peer, iov, cnt, skip, max);
  if (n <= 0) return n;
  r2s__lock(&st->post_lock);
  int rc = post_data_locked(st, from, st->peer.tail);
  r2s__unlock(&st->post_lock);
  if (rc == -EAGAIN) {
    /* No send slots, or none of the peer's receives, after all (control
     * writes took them): the bytes are taken back from our copy, which
     * nobody else reads, and the caller hears of a full ring (0). */
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
 * whose send queue is full (sq_full) waits for the device, and one short
 * of the peer's receives (imm_short) for the peer's report, not for the
 * peer's reader, and nothing of ours can wake them (they sleep on the TCP
 * socket, which only the peer can make readable): they ask the peer to
 * ring at once (SLEEP_AT_RING_NOW), and the peer reports its receives
 * first. The announcement goes behind every write of ours in the queue,
 * so by the time the peer hears it, it has acknowledged them all and our
 * slots are free or about to be; a writer that still finds none
 * announces again. */
void rd_sleep_tx(r2s_tp_state_t *st, bool on)
{
  if (!on || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  uint64_t seen = __atomic_load_n(&st->sq_full, __ATOMIC_SEQ_CST) || __atomic_load_n(&st->imm_short, __ATOMIC_SEQ_CST)
                      ? SLEEP_AT_RING_NOW
                      : __atomic_load_n(&peer_cline(st)->head, __ATOMIC_ACQUIRE);
  r2s__lock(&st->post_lock);
  (void)rd_announce_locked(st, seen, st->r_ring + OFF_PSLEEP, st->r_rkey, IMM_TX_SLEEP);
  r2s__unlock(&st->post_lock);
}

/* The end of our direction. To a peer that takes it (peer_close_imm) it
 * is a write of no bytes with immediate IMM_CLOSE: its completion comes
 * after every data immediate before it, so the peer's reader finds every
 * byte once it sees the close, and nothing relies on the order in which
 * writes are placed. An older peer gets producer_closed written, behind
 * the tail word if it takes data immediates (a reader that sees the close
 * must find every byte without a receive completion: one the device has
 * not yet produced would read as EOF), and relies on their order. */
void rd_close_tx(r2s_tp_state_t *st)
{
  if (!st->attached || state_error(st)) return;
  static const uint32_t one = 1;
  uint64_t tail = st->peer.tail;
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  unsigned n = 0;
  if (__atomic_load_n(&st->peer_close_imm, __ATOMIC_ACQUIRE)) {
    /* Zero bytes need no address (IBA C9-88); it names a word of ours
     * in the peer's ring all the same. Solicited: the peer's reader may
     * sleep, and its progress thread takes the close for it. */
    memset(&wr[0], 0, sizeof wr[0]);
    wr[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[0].send_flags = IBV_SEND_SOLICITED;
    wr[0].imm_data = htonl(R2S_RDMA_IMM_SLEEP | IMM_CLOSE);
    wr[0].wr.rdma.remote_addr = st->r_ring + OFF_PSLEEP;
    wr[0].wr.rdma.rkey = st->r_rkey;
    n = 1;
  } else {
    if (peer_imm(st)) rd_inline_write(&wr[n], &sge[n], &tail, 8, st->r_ring + OFF_TAIL, st->r_rkey), n++;
    rd_inline_write(&wr[n], &sge[n], &one, 4, st->r_ring + OFF_PCLOSED, st->r_rkey), n++;
  }
  r2s__lock(&st->post_lock);
  bool imm = wr[0].opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (imm) st->imm_posted++; /* one of the receives the reserve keeps for it */
  int rc = rd_post_locked(st, wr, n, false);
  if (rc && imm) st->imm_posted--;
  /* A full queue: the flush, which waits for slots, posts it. */
  if (rc == -EAGAIN) st->close_owed = 1;
  r2s__unlock(&st->post_lock);
}

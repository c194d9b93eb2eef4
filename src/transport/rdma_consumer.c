/* The consumer's side of an RDMA connection: the tail it learns from the
 * tail word and from the receive completions of data immediates, the
 * receives it reposts and reports, its reads, credits and sleep
 * announcement (rdma_conn.h). */
#include <arpa/inet.h>
#include <errno.h>

#include "../lockdebug.h"
#include "rdma_conn.h"
#include "rdma_imm.h"

/* Raises our ring's tail word to t, unless the peer's tail write already
 * raised it further. Why a CAS-max on a word the peer writes is safe:
 * both the tail words and the immediates the producer posts grow in
 * posting order, and one RC queue pair places its writes in that order;
 * the completion of a write with immediate comes after the write (and
 * every write posted before it) was placed. So when we raise the word to
 * an immediate's tail, every tail write posted before that immediate has
 * landed, and any tail write still to land was posted after it and
 * carries at least as much. A hostile word or immediate is no worse than
 * a hostile tail write: ring.c checks the word before every use. */
static void raise_tail(r2s_tp_state_t *st, uint64_t t)
{
  uint64_t cur = __atomic_load_n(&st->own.ctl->tail, __ATOMIC_ACQUIRE);
  while (cur < t &&
         !__atomic_compare_exchange_n(&st->own.ctl->tail, &cur, t, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
  }
}

/* Takes the receive completions there are and reposts their receives;
 * rx_lock held. A data immediate moves the tail forward: its 31 bits are
 * rebuilt from the last immediate's tail, which lies less than 2^31
 * behind (rdma_imm.h); sleep announcements are left in pending_sleep for
 * the progress thread, which is woken for them (solicited) even when a
 * reader took them first. The peer's close (IMM_CLOSE) ends our ring
 * where its data immediates brought the tail: its completion comes after
 * theirs, and we mark producer_closed ourselves, after the tail. */
void rd_take_recvs_locked(r2s_tp_state_t *st)
{
  struct ibv_wc wc[16];
  int k, used = 0;
  bool raise = false, closed = false;
  while ((k = ibv_poll_cq(st->rcq, 16, wc)) > 0) {
    for (int i = 0; i < k; i++) {
      used++;
      if (wc[i].status != IBV_WC_SUCCESS) {
        rd_fail_wc(st, wc[i].status, true);
        continue;
      }
      if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;
      uint32_t imm = ntohl(wc[i].imm_data);
      if (!peer_imm(st)) { /* the announcements of a peer without data immediates */
        st->pending_sleep |= imm == IMM_RX_SLEEP ? IMM_RX_SLEEP : imm == IMM_TX_SLEEP ? IMM_TX_SLEEP : 0;
      } else if (imm & R2S_RDMA_IMM_SLEEP) {
        st->pending_sleep |= (int)(imm & (IMM_RX_SLEEP | IMM_TX_SLEEP));
        closed = closed || (imm & IMM_CLOSE);
      } else {
        st->imm_tail = r2s__imm_tail_after(st->imm_tail, imm);
        raise = true;
      }
    }
  }
  if (k < 0) rd_lose_qp(st, "cannot poll the receive queue");
  if (raise) raise_tail(st, st->imm_tail);
  if (closed) __atomic_store_n(&st->own.ctl->producer_closed, 1, __ATOMIC_RELEASE);
  if (used && !state_error(st) && !__atomic_load_n(&st->flush_seen, __ATOMIC_ACQUIRE)) {
    if (rd_post_recvs(st, used) < 0)
      __atomic_store_n(&st->flush_seen, 1, __ATOMIC_RELEASE); /* judged by rd_judge */
    else
      __atomic_store_n(&st->recvs_done, st->recvs_done + (uint32_t)used, __ATOMIC_RELEASE);
  }
}

/* The reader's look at its receive completions, before it reads the tail:
 * with data immediates, nothing else tells it of new bytes. */
static void poll_recvs(r2s_tp_state_t *st)
{
  if (!peer_imm(st)) return;
  r2s__lock(&st->rx_lock);
  rd_take_recvs_locked(st);
  r2s__unlock(&st->rx_lock);
  rd_judge(st);
  if (__atomic_load_n(&st->recvs_done, __ATOMIC_ACQUIRE) - __atomic_load_n(&st->recvs_reported, __ATOMIC_ACQUIRE) >=
      REPORT_EVERY) {
    r2s__lock(&st->post_lock);
    (void)rd_report_locked(st, REPORT_EVERY);
    r2s__unlock(&st->post_lock);
  }
}

ssize_t rd_avail(r2s_tp_state_t *st)
{
  if (foreign(st)) return -ECONNRESET;
  poll_recvs(st);
  ssize_t n = r2s__ring_avail(&st->own);
  if (n == 0 && !__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE)) return rd_stuck(st);
  return n;
}

ssize_t rd_get(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek)
{
  if (foreign(st)) return -ECONNRESET;
  poll_recvs(st);
  ssize_t n = r2s__ring_get(&st->own, iov, cnt, max, peek);
  if (n > 0 && !peek && !state_error(st)) {
    __atomic_store_n(&st->rx_taken, st->own.head, __ATOMIC_SEQ_CST);
    /* Credits in batches of a quarter ring: a producer with room left
     * does not need them sooner, one that waits asks (IMM_TX_SLEEP). */
    if (st->own.head - __atomic_load_n(&st->credit_sent, __ATOMIC_ACQUIRE) >= st->own.size / 4) {
      r2s__lock(&st->post_lock);
      (void)rd_credit_locked(st);
      r2s__unlock(&st->post_lock);
    }
  }
  if (n == 0 && !__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE)) return rd_stuck(st);
  return n;
}

uint64_t rd_consumed(r2s_tp_state_t *st)
{
  return st->own.head;
}

bool rd_take_peer_tx_sleeper(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->armed_tx, __ATOMIC_SEQ_CST) || !__atomic_exchange_n(&st->armed_tx, 0, __ATOMIC_SEQ_CST))
    return false;
  /* The doorbell must find the credit there, or follow it closely. */
  r2s__lock(&st->post_lock);
  (void)rd_credit_locked(st);
  r2s__unlock(&st->post_lock);
  return true;
}

void rd_sleep_rx(r2s_tp_state_t *st, bool on)
{
  if (!on || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  r2s__lock(&st->post_lock);
  /* A reader about to sleep may wait for an answer to bytes of ours that
   * never arrived: a failed write shows only in the send queue, which
   * nothing else looks at while the connection is idle. */
  rd_reap_locked(st);
  (void)rd_credit_locked(st);
  (void)rd_announce_locked(st, __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST), st->r_credit + OFF_CSLEEP, st->r_credit_rkey, IMM_RX_SLEEP);
  r2s__unlock(&st->post_lock);
}

bool rd_peer_tx_closed(r2s_tp_state_t *st)
{
  if (foreign(st) || __atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE)) return false;
  if (!__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE)) poll_recvs(st); /* a close not yet taken */
  return __atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE) != 0;
}

bool rd_lost(r2s_tp_state_t *st)
{
  if (foreign(st)) return false;
  rd_judge(st);
  return state_error(st) == -ENOLINK;
}

/* The queue pair goes to the error state first: no write of the peer's
 * lands after it, and the completions taken next say what landed before.
 * Our ring then ends at the tail they and the tail word give; the peer
 * resends what lies past it. */
int rd_stop(r2s_tp_state_t *st, uint64_t *rx_end)
{
  if (foreign(st)) return -ECONNRESET;
  if (!__atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE)) {
    int none = 0;
    (void)__atomic_compare_exchange_n(&st->broken, &none, -ENOLINK, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    (void)R2S_V(ibv_modify_qp)(st->qp, &a, IBV_QP_STATE);
    r2s__lock(&st->rx_lock);
    rd_take_recvs_locked(st);
    r2s__unlock(&st->rx_lock);
    ssize_t n = r2s__ring_avail(&st->own);
    if (n < 0) return (int)n;
    if (r2s__ring_freeze(&st->own, st->own.tail) < 0) return -EPROTO;
    __atomic_store_n(&st->stopped, 1, __ATOMIC_RELEASE);
  }
  *rx_end = st->own.tail;
  return 0;
}

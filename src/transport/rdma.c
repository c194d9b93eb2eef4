/* The RDMA transport: one RC queue pair per connection. Each end's receive
 * ring (a control page and the data, the layout of ring.h) is registered
 * for remote write; the producer copies the application's bytes into a
 * local copy of the peer's ring, RDMA-writes the new bytes to the same
 * offsets there, the last write carrying the new tail; the consumer
 * RDMA-writes its head back into the producer's credit word. One copy in,
 * one copy out, as with shared memory.
 *
 * Data immediates (a peer with R2S_CAP_RDMA_IMM): one packet per message.
 * The last data write carries the new tail's low 31 bits as its immediate;
 * the consumer learns the tail from its receive completions
 * (rd_take_recvs_locked), taken by whoever polls first, its reader (avail,
 * get) or the progress thread. A completion comes only once its write and
 * every earlier write of the queue pair were placed, so nothing relies on
 * the order in which the device places writes (docs/rdma.md). Each such
 * write uses one of the consumer's R2S_RDMA_RECVS posted receives; the
 * consumer reports how many it reposted (consumer_recvs in the credit
 * line), the producer solicits a completion once half may be in use (the
 * consumer's progress thread then reposts), and a producer that may have
 * used too many waits for the report as for room in the ring. Its close
 * is a write with immediate too (R2S_CAP_RDMA_CLOSE_IMM). A peer without
 * data immediates gets the data, then a write of the tail word; the
 * consumer's tail is the larger of the tail word and the last immediate,
 * both of which only ever grow in the order the producer posted them
 * (raise_tail argues why a late completion cannot lower a tail the word
 * already raised).
 *
 * Sleeping: a consumer about to sleep tells its producer with an RDMA
 * write with immediate (the head it saw), which only the producer's
 * progress thread notices; that thread sends a DOORBELL over TCP at once
 * if bytes were posted beyond that head, or arms the next put to. A
 * producer waiting for room does the same the other way. Both sides then
 * sleep in the kernel on the TCP socket, as with shared memory, so the
 * application's own poll/epoll keep working (transport.h). */
#include <stdint.h>

#include "../clock.h"
#include "../lockdebug.h"
#include "../stats.h"
#include "../transport.h"
#include "rdma.h"
#include "rdma_conn.h"

/* ---- the progress thread's side ---- */

void r2s__rdma_on_fatal(r2s_tp_state_t *st, const char *why)
{
  if (!foreign(st)) rd_fail_qp(st, why);
}

void r2s__rdma_on_lost(r2s_tp_state_t *st, const char *why)
{
  if (foreign(st)) return;
  rd_lose_qp(st, why);
  rd_tell_lost(st);
}

void r2s__rdma_on_tick(r2s_tp_state_t *st)
{
  rd_watch(st);
}

void r2s__rdma_on_event(r2s_tp_state_t *st)
{
  if (foreign(st)) return;
  /* Re-armed before polling: a completion after the poll then raises a
   * new event instead of waiting unseen. With data immediates only the
   * solicited ones (sleep announcements) and errors raise one. A reader
   * that took an announcement's completion first left it in
   * pending_sleep under rx_lock: either before we take the lock (we find
   * it), or the completion was still in the queue when we polled (we
   * take it ourselves). */
  (void)ibv_req_notify_cq(st->rcq, peer_imm(st) ? 1 : 0);
  r2s__lock(&st->rx_lock);
  rd_take_recvs_locked(st);
  int pending = st->pending_sleep;
  st->pending_sleep = 0;
  r2s__unlock(&st->rx_lock);
  rd_judge(st);
  if (state_error(st)) {
    rd_tell_lost(st);
    return;
  }
  bool rx = pending & IMM_RX_SLEEP, tx = pending & IMM_TX_SLEEP;
  /* The doorbells below go through our duplicate of the socket. Without it
   * (the application took its number, rd_own_fd) the flags stay set for the
   * application's threads: their next write or read of this connection
   * rings through the application's own descriptor, and until then a
   * sleeper's wait ends by its slice (100 ms) at the latest. */
  int fd;
  /* A producer that waits may wait for receives: it gets the count now. */
  r2s__lock(&st->post_lock);
  (void)rd_report_locked(st, tx ? 1 : REPORT_EVERY);
  r2s__unlock(&st->post_lock);
  if (rx) { /* the peer's reader sleeps: does it know of all we posted? */
    __atomic_store_n(&st->armed_rx, 1, __ATOMIC_SEQ_CST);
    uint64_t seen = __atomic_load_n(&peer_cline(st)->consumer_sleep_at, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&st->tx_posted, __ATOMIC_SEQ_CST) > seen && (fd = rd_own_fd(st)) >= 0 &&
        rd_take_peer_rx_sleeper(st))
      st->wake(st->wake_arg, fd);
  }
  if (tx) { /* the peer's writer waits for room: did we free some it has not seen? */
    __atomic_store_n(&st->armed_tx, 1, __ATOMIC_SEQ_CST);
    uint64_t seen = __atomic_load_n(&st->own.ctl->producer_sleep_at, __ATOMIC_ACQUIRE);
    r2s__lock(&st->post_lock);
    (void)rd_credit_locked(st);
    bool ring = __atomic_load_n(&st->credit_sent, __ATOMIC_ACQUIRE) > seen || seen == SLEEP_AT_RING_NOW;
    r2s__unlock(&st->post_lock);
    if (ring && (fd = rd_own_fd(st)) >= 0 && __atomic_exchange_n(&st->armed_tx, 0, __ATOMIC_SEQ_CST))
      st->wake(st->wake_arg, fd);
  }
}

/* Waits until everything posted has left (the last request asks for a
 * completion so that the wait can end). Not for a peer that is gone: a
 * killed peer's queue pair never answers, and close() then exit() each
 * waited their whole bound for it (survivors of rxe.faults' kills ended
 * 1.6 to 4 s after the kill, where a survivor should end within 1 s). Nor for
 * a peer that is done (rd_peer_done). The wait ends on the completion of our
 * final credit (rd_final_credit_locked), which also tells a peer closing
 * after us that we are done. */
void r2s__rdma_drain(r2s_tp_state_t *st, uint64_t deadline_ns)
{
  if (foreign(st) || rd_tcp_reset(st)) return;
  r2s__lock(&st->post_lock);
  rd_reap_locked(st);
  if (rd_peer_done(st)) {
    r2s__unlock(&st->post_lock);
    return;
  }
  if (st->close_owed && !state_error(st) && rd_wait_slots_locked(st, 2, (int64_t)deadline_ns, true) == 0) {
    st->close_owed = 0;
    r2s__unlock(&st->post_lock);
    rd_close_tx(st);
    r2s__lock(&st->post_lock);
  }
  if (!state_error(st) && (st->sq_out || __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST) != st->credit_sent))
    (void)rd_final_credit_locked(st);
  /* Counted: each one is a close that waited for the device's retries
   * (about 0.5 s) or its bound, or found the peer reset. */
  if (st->sq_out && !state_error(st) && rd_wait_slots_locked(st, SQ_DEPTH, (int64_t)deadline_ns, true) != 0)
    R2S_STAT_INC(rdma_drain_failed);
  r2s__unlock(&st->post_lock);
}

void r2s__rdma_exit(int ms)
{
  /* Only a process that made an RDMA offer has anything to drain; the
   * others (nearly all) must not load libibverbs just to exit. */
  if (!r2s__verbs_loaded()) return;
  r2s__rdma_for_each(r2s__rdma_drain, (uint64_t)r2s__now_ns() + (uint64_t)ms * 1000000u);
}

static void rdma_flush(r2s_tp_state_t *st)
{
  r2s__rdma_drain(st, (uint64_t)r2s__now_ns() + 1000000000u);
}

static void rdma_release(r2s_tp_state_t *st)
{
  if (!foreign(st)) {
    /* Bytes the application handed us before close() still go out, as
     * the kernel would send them for TCP. */
    rdma_flush(st);
    r2s__rdma_untrack(st);
    rd_destroy(st);
    r2s__rdma_dev_put(st->port.dev);
  }
  /* In a fork child the verbs objects are the parent's: only our copies
   * of the memory go. */
  rd_free_state(st);
}

const r2s_transport_t r2s__transport_rdma = {
    .name = "rdma",
    .path = R2S_PATH_RDMA,
    .needs_ready = true,
    .adaptive_spin = true,
    .flush_waits_for_peer = true,
    .rank = rd_rank,
    .offer = rd_offer,
    .connect = rd_connect,
    .check = rd_check,
    .reaches = rd_reaches,
    .attach = rd_attach,
    .seal = rd_seal,
    .space = rd_space,
    .put = rd_put,
    .avail = rd_avail,
    .get = rd_get,
    .produced = rd_produced,
    .consumed = rd_consumed,
    .sleep_rx = rd_sleep_rx,
    .sleep_tx = rd_sleep_tx,
    .take_peer_rx_sleeper = rd_take_peer_rx_sleeper,
    .take_peer_tx_sleeper = rd_take_peer_tx_sleeper,
    .lost = rd_lost,
    .stop = rd_stop,
    .unacked = rd_unacked,
    .peer_tx_closed = rd_peer_tx_closed,
    .close_tx = rd_close_tx,
    .flush = rdma_flush,
    .release = rdma_release,
};

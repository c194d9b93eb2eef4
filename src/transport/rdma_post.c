/* The RDMA transport's send queue: posting with selective signalling, the
 * accounting of its slots, the credits, receive reports and sleep
 * announcements written into the peer's ring, the receives posted for the
 * peer's immediates; how the connection ends when its queue pair fails,
 * and the liveness check that finds a queue pair stalled with no error
 * (rdma_conn.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "../clock.h"
#include "../libc.h"
#include "../lockdebug.h"
#include "../log.h"
#include "../stats.h"
#include "rdma_conn.h"

/* ---- failure ---- */

/* dupfd while it is still the connection's socket, else -1 (libc.h: the
 * application may have taken the number back for a file of its own, which
 * must never get a doorbell, a shutdown or a close from us). */
int rd_own_fd(const r2s_tp_state_t *st)
{
  return r2s__still_sock(st->dupfd, st->dup_ino) ? st->dupfd : -1;
}

/* The connection's TCP state (TCP_ESTABLISHED...), or -1 if it cannot be
 * had. */
static int tcp_state(const r2s_tp_state_t *st)
{
  struct tcp_info ti;
  socklen_t n = sizeof ti;
  int fd = rd_own_fd(st);
  if (fd < 0 || r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0) return -1;
  return ti.tcpi_state;
}

/* The peer reset the TCP connection (or it was aborted): nothing we
 * posted can reach a reader any more. A connection both ends merely shut
 * down is not CLOSE here (FIN_WAIT, TIME_WAIT, LAST_ACK...), so a peer
 * still reading after its own shutdown is waited for as before. */
bool rd_tcp_reset(const r2s_tp_state_t *st)
{
  return tcp_state(st) == TCP_CLOSE;
}

/* The peer ended its side: we hold its FIN (or its reset). */
static bool peer_ended(const r2s_tp_state_t *st)
{
  if (__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE)) return true;
  int s = tcp_state(st);
  return s == TCP_CLOSE_WAIT || s == TCP_LAST_ACK || s == TCP_CLOSING || s == TCP_TIME_WAIT || s == TCP_CLOSE;
}

/* Nothing we posted can matter to the peer any more: it ended its side
 * (its FIN is here) and its last credit says it read every byte we wrote.
 * What may still be in flight then is credits and announcements, and the
 * peer may have destroyed its queue pair already: waiting for their
 * acknowledgement would wait out the device's retries (about 0.5 s per
 * close: 25 to 38 of 40 short request/response connections did). */
bool rd_peer_done(const r2s_tp_state_t *st)
{
  uint64_t written = __atomic_load_n(&st->tx_posted, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&peer_cline(st)->head, __ATOMIC_ACQUIRE) == written && peer_ended(st);
}

/* The queue pair failed in a way that says the peer broke the rules (a
 * wrong rkey, a ring smaller than it said), or under a connection TCP
 * says is over: the connection ends. The socket is shut down so that both
 * ends' sleepers wake (and find ECONNRESET here, EOF or a reset there). */
void rd_fail_qp(r2s_tp_state_t *st, const char *why)
{
  int none = 0;
  if (!__atomic_compare_exchange_n(&st->broken, &none, -ECONNRESET, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  /* A peer that ended its side destroys its queue pair with its close,
   * and a credit or a write of ours still on its way then fails after the
   * retries: the connection's end, which TCP reports as it would, not a
   * fault to warn of (every iperf3 run ended with such warnings). */
  if (peer_ended(st)) {
    r2s__debug("RDMA connection ended after the peer's close (%s)", why);
  } else {
    R2S_STAT_INC(reset_rdma);
    r2s__warn("RDMA connection failed (%s): reset", why);
  }
  int fd = rd_own_fd(st);
  if (fd >= 0) (void)r2s__libc.shutdown(fd, SHUT_RDWR);
}

/* The channel failed under the connection (the device's retries ran out,
 * the queue pair or the device died): the TCP connection may well live,
 * and the link moves the stream onto it without losing a byte (lost(),
 * stop(), unacked()). Not where TCP says the connection is over anyway,
 * nor where the peer ended its side and read every byte we wrote (its
 * close destroyed its queue pair: the normal end). The link hears of it
 * from its own calls (lost()), or from the progress thread (rd_tell_lost),
 * never from here: this may run under our locks. */
void rd_lose_qp(r2s_tp_state_t *st, const char *why)
{
  if (state_error(st)) return; /* told once (a failed queue flushes every request in it) */
  if (rd_tcp_reset(st) || rd_peer_done(st)) {
    rd_fail_qp(st, why);
    return;
  }
  int none = 0;
  if (!__atomic_compare_exchange_n(&st->broken, &none, -ENOLINK, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    r2s__warn("RDMA channel failed (%s): its connections go on over TCP", why);
  else
    r2s__info("RDMA channel failed (%s): the connection goes on over TCP", why);
}

/* A work completion in error: a fault of the peer's making resets the
 * connection; anything else (requests the peer never answered above all)
 * is the channel's loss.
 * A flushed request says only that the queue pair is in the error state:
 * after our requests went unanswered (a completion with the retries'
 * error comes first in the send queue), or after the peer broke the
 * rules (a remote access error ends the responder's queue pair too, and
 * it sees nothing but flushes). It is judged once the send queue was
 * read (rd_judge_locked). */
void rd_fail_wc(r2s_tp_state_t *st, int status, bool recv)
{
  const char *why = R2S_V(ibv_wc_status_str)((enum ibv_wc_status)status);
  switch (status) {
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_OP_ERR:
  case IBV_WC_LOC_PROT_ERR:
  case IBV_WC_LOC_ACCESS_ERR:
  case IBV_WC_LOC_LEN_ERR:
  case IBV_WC_BAD_RESP_ERR:
    rd_fail_qp(st, why);
    break;
  case IBV_WC_WR_FLUSH_ERR:
    __atomic_store_n(&st->flush_seen, 1, __ATOMIC_RELEASE);
    break;
  case IBV_WC_LOC_QP_OP_ERR:
    /* On a receive: the peer sent what our receives never take (a SEND);
     * on one of our requests, the queue pair's own state. */
    if (recv) {
      rd_fail_qp(st, why);
      break;
    }
    /* fall through */
  default:
    rd_lose_qp(st, why);
  }
}

/* A flush (or a failed post) with no cause seen yet: the send queue's
 * completions give it, a lost channel if they hold the retries' error;
 * with none, the queue pair failed by the peer's doing, as before
 * failover existed: a reset. post_lock held. */
void rd_judge_locked(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->flush_seen, __ATOMIC_ACQUIRE) || state_error(st)) return;
  rd_reap_locked(st);
  if (!state_error(st)) rd_fail_qp(st, "Work Request Flushed Error");
}

/* The same with no lock held. */
void rd_judge(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->flush_seen, __ATOMIC_ACQUIRE) || state_error(st)) return;
  r2s__lock(&st->post_lock);
  rd_judge_locked(st);
  r2s__unlock(&st->post_lock);
}

/* From the progress thread, with none of our locks held: a lost channel
 * is told to the link once, so that an idle connection fails over too. */
void rd_tell_lost(r2s_tp_state_t *st)
{
  if (state_error(st) != -ENOLINK || __atomic_load_n(&st->lost_told, __ATOMIC_ACQUIRE) ||
      __atomic_exchange_n(&st->lost_told, 1, __ATOMIC_ACQ_REL))
    return;
  int fd = rd_own_fd(st);
  if (fd >= 0 && st->lost) st->lost(st->wake_arg, fd);
}

/* ---- posting ---- */

/* Takes the send completions there are; post_lock held. */
void rd_reap_locked(r2s_tp_state_t *st)
{
  struct ibv_wc wc[16];
  int k;
  while ((k = ibv_poll_cq(st->scq, 16, wc)) > 0) {
    for (int i = 0; i < k; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        rd_fail_wc(st, wc[i].status, false);
        continue;
      }
      st->sq_out -= (unsigned)wc[i].wr_id;
      st->sig_out--;
      st->sq_done++;
    }
  }
  if (k < 0) rd_lose_qp(st, "cannot poll the send queue");
  if (__atomic_load_n(&st->flush_seen, __ATOMIC_ACQUIRE) && !state_error(st))
    rd_fail_qp(st, "Work Request Flushed Error");
}

/* Waits until `need` send slots are free; post_lock held, and let go
 * while the wait sleeps (the progress thread and the readers' credits
 * must not wait behind it). The NIC frees them within a round trip, or
 * fails the queue pair after its retries; a queue still full at the
 * deadline fails the connection unless `soft` (a close that gives up
 * waiting has nothing left to fail). Only a flush waits (drain): a
 * data or control write that finds the queue full does not (rd_post_locked). */
int rd_wait_slots_locked(r2s_tp_state_t *st, unsigned need, int64_t deadline, bool soft)
{
  for (unsigned spins = 0;; spins++) {
    rd_reap_locked(st);
    int err = state_error(st);
    if (err) return err;
    if (st->sq_out + need <= SQ_DEPTH) return 0;
    if (soft && rd_peer_done(st)) return 0;
    /* A peer that reset the TCP connection will not answer: a drain
     * (soft) ends, a sender fails the connection, at once. */
    if (spins > 64 && rd_tcp_reset(st)) {
      if (soft) return -ECONNRESET;
      rd_fail_qp(st, "the peer reset the connection");
      return -ECONNRESET;
    }
    if (r2s__now_ns() > deadline) {
      if (soft) return -ETIMEDOUT;
      rd_lose_qp(st, "send queue stuck");
      return state_error(st);
    }
    /* The queue frees within a round trip; past a few polls, let the
     * CPU go (on a small machine the NIC, or Soft-RoCE, needs it). */
    if (spins > 64) {
      struct timespec ts = {0, spins > 1024 ? 200000 : 10000};
      r2s__unlock(&st->post_lock);
      r2s__lock_debug_blocking("nanosleep");
      nanosleep(&ts, NULL);
      r2s__lock(&st->post_lock);
    }
  }
}

/* Are `need` send slots free, beyond `reserve`? Takes the completions
 * there are first. post_lock held. */
bool rd_sq_room_locked(r2s_tp_state_t *st, unsigned need, unsigned reserve)
{
  if (st->sq_out + need + reserve <= SQ_DEPTH) return true;
  rd_reap_locked(st);
  return st->sq_out + need + reserve <= SQ_DEPTH;
}

/* Posts a chain of n requests; the last asks for a completion when due
 * (its wr_id says how many requests that completion retires). A full
 * queue is -EAGAIN, never a wait (transport.h: put never blocks, and the
 * callers hold locks): the caller tries again later. post_lock held. */
int rd_post_locked(r2s_tp_state_t *st, struct ibv_send_wr *wr, unsigned n, bool signal)
{
  if (!rd_sq_room_locked(st, n, 0)) {
    int err = state_error(st);
    return err ? err : -EAGAIN;
  }
  for (unsigned i = 0; i + 1 < n; i++) wr[i].next = &wr[i + 1];
  wr[n - 1].next = NULL;
  bool signalled = signal || st->unsignalled + n >= SIGNAL_EVERY || st->sq_out + n >= SQ_DEPTH / 2;
  if (signalled) {
    wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
    wr[n - 1].wr_id = st->unsignalled + n;
    st->unsignalled = 0;
    st->sig_out++;
  } else {
    st->unsignalled += n;
  }
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(st->qp, wr, &bad);
  if (rc) {
    if (signalled) st->sig_out--;
    /* The queue pair is in the error state: why, its completions say. */
    __atomic_store_n(&st->flush_seen, 1, __ATOMIC_RELEASE);
    rd_reap_locked(st);
    return state_error(st);
  }
  st->sq_out += n;
  return 0;
}

/* A small write whose bytes travel inside the request. */
void rd_inline_write(struct ibv_send_wr *wr, struct ibv_sge *sge, const void *p, uint32_t len, uint64_t raddr,
                     uint32_t rkey)
{
  memset(wr, 0, sizeof *wr);
  *sge = (struct ibv_sge){.addr = (uintptr_t)p, .length = len, .lkey = 0};
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->send_flags = IBV_SEND_INLINE;
  wr->wr.rdma.remote_addr = raddr;
  wr->wr.rdma.rkey = rkey;
}

/* How many receives we reposted into the peer's credit line, once at
 * least `min` are new; post_lock held. */
int rd_report_locked(r2s_tp_state_t *st, uint32_t min)
{
  uint32_t done = __atomic_load_n(&st->recvs_done, __ATOMIC_ACQUIRE);
  if (!peer_imm(st) || !st->connected || done - st->recvs_reported < min) return 0;
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  rd_inline_write(&wr, &sge, &done, 4, st->r_credit + OFF_CRECVS, st->r_credit_rkey);
  int rc = rd_post_locked(st, &wr, 1, false);
  if (rc == 0) __atomic_store_n(&st->recvs_reported, done, __ATOMIC_RELEASE);
  return rc;
}

/* Head h into the peer's credit word; post_lock held. */
static int write_head_locked(r2s_tp_state_t *st, uint64_t h, bool signal)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  rd_inline_write(&wr, &sge, &h, 8, st->r_credit, st->r_credit_rkey);
  int rc = rd_post_locked(st, &wr, 1, signal);
  if (rc == 0) __atomic_store_n(&st->credit_sent, h, __ATOMIC_RELEASE);
  return rc;
}

/* Our head into the peer's credit word, if it moved; post_lock held. A
 * producer that waits for credits may wait for receives too: the count
 * goes with every credit. */
int rd_credit_locked(r2s_tp_state_t *st)
{
  uint64_t h = __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST);
  if (h == st->credit_sent || !st->connected) return 0;
  int rc = write_head_locked(st, h, false);
  return rc ? rc : rd_report_locked(st, 1);
}

/* Our head into the peer's credit line, asking for a completion: the last
 * request of a drain (the completion says every earlier one was placed,
 * since one queue pair completes in order) and the final credit a peer
 * that closes after us looks at (rd_peer_done). Rewriting an unchanged head
 * is harmless, and the line is ours to write from connect on; but it is
 * only called when something was posted before or the peer wrote to us,
 * so its queue pair takes writes. The report goes first: nothing may
 * follow the signalled request. post_lock held. */
int rd_final_credit_locked(r2s_tp_state_t *st)
{
  if (!st->connected) return 0;
  (void)rd_report_locked(st, 1);
  return write_head_locked(st, __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST), true);
}

/* The liveness check (docs/rdma.md), from the progress thread once a
 * second, none of our locks held. Soft-RoCE can leave a queue pair
 * stalled with no error (after a link outage), so a signalled request
 * that gets no completion for UNANSWERED_NS, four times the retries'
 * own bound (about 0.5 s, rd_connect), makes the channel lost and the
 * link fails over. Unsignalled requests never complete alone: a quiet
 * connection left with some gets one signalled credit (its current head,
 * harmless to rewrite). A connection that moves nothing, or whose peer
 * does not read (credits stop our writes), has nothing outstanding and
 * is never judged. Cost: a poll of the send queue (no system call) per
 * connection and second. */
#define UNANSWERED_NS 2000000000ll
void rd_watch(r2s_tp_state_t *st)
{
  if (foreign(st) || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  int64_t now = r2s__now_ns();
  bool stalled = false;
  r2s__lock(&st->post_lock);
  /* Nothing else reaps an idle connection's send queue: a request failed
   * there (the retries ran out) is found here. */
  rd_reap_locked(st);
  if (state_error(st)) {
    /* found above */
  } else if (st->sig_out) {
    if (!st->watch_since || st->sq_done != st->watch_done) {
      st->watch_done = st->sq_done;
      st->watch_since = now;
    } else if (now - st->watch_since >= UNANSWERED_NS) {
      stalled = true;
    }
  } else {
    st->watch_since = 0;
    /* Not towards a peer that ended its side: it may have destroyed its
     * queue pair, and a probe that fails there would end a connection
     * whose last bytes we may still be reading. */
    if (st->unsignalled && !peer_ended(st))
      (void)write_head_locked(st, __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST), true);
  }
  r2s__unlock(&st->post_lock);
  if (stalled) rd_lose_qp(st, "requests unanswered for 2 s");
  rd_tell_lost(st);
}

/* Tells the peer we sleep: value into its word at raddr, with an
 * immediate so its progress thread hears of it (solicited: with data
 * immediates, that thread wakes for nothing else). post_lock held. */
int rd_announce_locked(r2s_tp_state_t *st, uint64_t value, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  rd_inline_write(&wr, &sge, &value, 8, raddr, rkey);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  if (peer_imm(st)) {
    imm |= R2S_RDMA_IMM_SLEEP;
    wr.send_flags |= IBV_SEND_SOLICITED;
    st->imm_posted++;
  }
  wr.imm_data = htonl(imm);
  int rc = rd_post_locked(st, &wr, 1, false);
  if (rc && peer_imm(st)) st->imm_posted--; /* not posted: no receive of the peer's used */
  return rc;
}

/* May the next data write carry an immediate? Not when the peer may be
 * short of receives: the count it reported is taken only if it moves
 * forward and not past what we posted (a lie then only costs the liar
 * its own throughput, or stalls its queue pair). post_lock held. */
bool rd_imm_room_locked(r2s_tp_state_t *st)
{
  if (!peer_imm(st)) return false;
  uint32_t r = __atomic_load_n(&peer_cline(st)->consumer_recvs, __ATOMIC_ACQUIRE);
  if (r - st->imm_acked <= st->imm_posted - st->imm_acked) st->imm_acked = r;
  return st->imm_posted - st->imm_acked < RQ_DEPTH - IMM_RESERVE;
}

int rd_post_recvs(r2s_tp_state_t *st, int n)
{
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    if (ibv_post_recv(st->qp, &wr, &bad)) return -EIO;
  }
  return 0;
}

/* Failover: the channel under the rings failed while the TCP connection
 * lives (RDMA: the device's retries ran out, the queue pair or the device
 * died), and the stream goes on over TCP, neither losing nor repeating a
 * byte (docs/protocol.md, "Failover").
 *
 * An end that learns of the loss (its transport's lost(), from its own
 * calls or its progress thread; the peer's FAILOVER frame; the test knob
 * R2SOCK_FAIL_AFTER) stops its rings, the transport's stop(): our ring
 * ends at rx_lost_at and no byte written into it later is read, nothing
 * more goes into the peer's. It sends FAILOVER(rx_lost_at): "my ring
 * holds your stream up to here". An end that reads the peer's
 * FAILOVER(at) ends its send direction's ring with a PLAIN frame at `at`
 * and sends, behind it over plain TCP, the bytes it had put into the ring
 * from `at` on (unacked(): the peer never took them, so they are still
 * in our copy of its ring; the backlog), then the application's. The
 * reader reads its ring up to rx_lost_at and then TCP, as after any
 * PLAIN. Its own FAILOVER goes before its PLAIN: nothing but application
 * bytes may follow a PLAIN.
 *
 * The backlog is pushed by every call that flushes the control queue
 * (lk_flush_ctrl), and by a thread of its own while the application
 * does not write (a reader waiting for the answer to bytes still in the
 * backlog would wait for ever); close() waits for it, as the bytes exist
 * nowhere else. */
#include "internal.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "libc.h"
#include "log.h"

bool lk_channel_lost(const r2s_link_t *l)
{
  const r2s_transport_t *tp = TP(l);
  return tp && tp->lost && tp->lost(TPS(l));
}

/* The test knob: our bytes in the ring reached R2SOCK_FAIL_AFTER.
 * tx_lock held. */
bool lk_fail_after_due(const r2s_link_t *l)
{
  return r2s__opt.fail_after && l->tx_state == R2S_TX_RING && !LOST(l) &&
         TP(l)->produced(TPS(l)) >= r2s__opt.fail_after;
}

/* Stops our rings and owes the peer our FAILOVER. Both locks held. */
void lk_lose_locked(r2s_link_t *l, int fd)
{
  if (LOST(l) || FAILED(l) || !TPS(l)) return;
  uint64_t at = 0;
  int rc = TP(l)->stop ? TP(l)->stop(TPS(l), &at) : -EOPNOTSUPP;
  if (rc < 0) {
    lk_fail(l, rc, "the ring's channel failed and the ring cannot be stopped");
    return;
  }
  l->rx_lost_at = at;
  __atomic_store_n(&l->lost, 1, __ATOMIC_RELEASE);
  lk_changed(l);
  l->failover_owed = true;
  R2S_STAT_INC(failovers);
  r2s__info("the %s ring's channel failed: the connection goes on over TCP (our ring ends at %llu)",
            TP(l)->name, (unsigned long long)at);
  lk_failover_owed_locked(l, fd);
}

/* From a call that holds no lock of the link. */
void lk_lose(r2s_link_t *l, int fd)
{
  r2s__lock(&l->rx_lock);
  r2s__lock(&l->tx_lock);
  lk_lose_locked(l, fd);
  lk_tx_unlock(l, fd);
  lk_rx_unlock(l, fd);
}

/* The transport's thread found the channel failed (r2s_tp_conn_t.lost):
 * it must not wait for our locks. A thread that holds one will find the
 * loss itself (lost() at its next look at the rings). */
void lk_transport_lost(void *arg, int fd)
{
  r2s_link_t *l = arg;
  lk_changed(l);
  if (r2s__trylock(&l->rx_lock) != 0) return;
  if (r2s__trylock(&l->tx_lock) == 0) {
    lk_lose_locked(l, fd);
    lk_tx_unlock(l, fd);
  }
  lk_rx_unlock(l, fd);
}

/* ---- the send direction ---- */

static void *push_backlog(void *arg);

static int pushers; /* atomic: push_backlog threads running */

void r2s__link_failover_exit(int ms)
{
  for (int i = 0; i < ms && __atomic_load_n(&pushers, __ATOMIC_ACQUIRE); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* A thread pushes the backlog while the application does not: it holds a
 * reference on the link and a duplicate of the socket of its own. */
static void start_pusher(r2s_link_t *l, int fd)
{
  int dup = r2s__libc.fcntl(fd, F_DUPFD_CLOEXEC, 512);
  if (dup < 0) return; /* the application's own calls push it */
  struct stat sb;
  pthread_t t;
  pthread_attr_t a;
  __atomic_add_fetch(&l->refs, 1, __ATOMIC_ACQ_REL);
  void **args = malloc(3 * sizeof *args);
  bool ok = args && fstat(dup, &sb) == 0 && pthread_attr_init(&a) == 0;
  if (ok) {
    args[0] = l, args[1] = (void *)(intptr_t)dup, args[2] = (void *)(uintptr_t)sb.st_ino;
    (void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    __atomic_add_fetch(&pushers, 1, __ATOMIC_ACQ_REL);
    ok = pthread_create(&t, &a, push_backlog, args) == 0;
    if (!ok) __atomic_sub_fetch(&pushers, 1, __ATOMIC_ACQ_REL);
    pthread_attr_destroy(&a);
  }
  if (!ok) {
    free(args);
    r2s__libc.close(dup);
    __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL); /* ours is not the last: the caller holds one */
  }
}

static void *push_backlog(void *arg)
{
  void **args = arg;
  r2s_link_t *l = args[0];
  int fd = (int)(intptr_t)args[1];
  ino_t ino = (ino_t)(uintptr_t)args[2];
  free(args);
  for (;;) {
    /* The application may have closed our duplicate's number and reused
     * it (closefrom): then it is not ours to write to. */
    if (!r2s__still_sock(fd, ino)) break;
    r2s__lock(&l->tx_lock);
    int rc = l->backlog ? lk_flush_ctrl(l, fd) : 0;
    bool done = !l->backlog || (rc < 0 && rc != -EAGAIN) || FAILED(l);
    lk_tx_unlock(l, fd);
    if (done) break;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    (void)r2s__libc.poll(&p, 1, 1000);
  }
  if (r2s__still_sock(fd, ino)) r2s__libc.close(fd);
  r2s__link_free(l);
  __atomic_sub_fetch(&pushers, 1, __ATOMIC_ACQ_REL);
  return NULL;
}

/* Our answer to the peer's FAILOVER(at): the send direction's ring ends
 * at `at`, and what we put there past it goes behind our PLAIN. tx_lock
 * held, our FAILOVER already queued. */
static int answer_peer_locked(r2s_link_t *l, int fd, uint64_t at)
{
  if (l->tx_state == R2S_TX_FRAMES) {
    /* The peer's ring never had a byte of ours; DATA frames go on. */
    if (at != 0) return -EPROTO;
    l->no_ring = true;
    return 0;
  }
  if (l->tx_state != R2S_TX_RING) return 0;
  if (l->plain_unsent) {
    /* Our PLAIN (urgent data) already says the ring ends at what we put,
     * which the peer's stopped ring may not hold: no resend can go
     * before the bytes queued behind it. */
    lk_fail_tx(l, -ECONNRESET, "the ring's channel failed as the direction went back to TCP");
    return 0;
  }
  uint64_t produced = TP(l)->produced(TPS(l));
  if (l->tx_shut) {
    /* Our FIN followed the flush, which saw every byte placed: the peer
     * has them all, or the flush gave up on it. */
    if (at != produced) lk_fail_tx(l, -ECONNRESET, "the ring's channel failed after our shutdown");
    return 0;
  }
  struct iovec iov[2];
  int k = TP(l)->unacked(TPS(l), at, iov);
  if (k < 0) return -EPROTO;
  size_t len = (size_t)(produced - at);
  if (len) {
    l->backlog = malloc(len);
    if (!l->backlog) {
      lk_fail_tx(l, -ENOMEM, "no memory for the bytes to resend");
      return 0;
    }
    size_t off = 0;
    for (int i = 0; i < k; i++) memcpy(l->backlog + off, iov[i].iov_base, iov[i].iov_len), off += iov[i].iov_len;
    l->backlog_len = len, l->backlog_off = 0;
    __atomic_store_n(&l->backlog_left, 1, __ATOMIC_RELEASE);
  }
  if (lk_queue_plain_at_locked(l, R2S_REASON_NONE, at) < 0) {
    /* No room behind our FAILOVER yet: flushed, then asked again. */
    free(l->backlog);
    l->backlog = NULL, l->backlog_len = 0;
    __atomic_store_n(&l->backlog_left, 0, __ATOMIC_RELEASE);
    return -EAGAIN;
  }
  r2s__debug("the peer's ring ends at %llu: %zu bytes resent over TCP", (unsigned long long)at, len);
  (void)lk_flush_ctrl(l, fd);
  if (l->backlog) start_pusher(l, fd);
  return 0;
}

/* Queues what failover owes the peer: our FAILOVER, then our answer to
 * its own. tx_lock held. */
void lk_failover_owed_locked(r2s_link_t *l, int fd)
{
  if (l->failover_owed) {
    uint8_t f[R2S_FRAME_HDR_LEN + 8];
    r2s__frame_u64_encode(R2S_FRAME_FAILOVER, l->rx_lost_at, f, sizeof f);
    /* Not inside a DATA frame still being sent, nor behind our PLAIN
     * (then the direction is plain TCP and the peer reads no frame from
     * it: it learns of the loss by its own, or stays on DATA frames). */
    if (l->plain_unsent || l->tx_state == R2S_TX_PLAIN || l->tx_state == R2S_TX_PROBE) {
      l->failover_owed = false;
    } else if (l->tx_data_left == 0) {
      if (sizeof l->tx_pending - l->tx_pending_len < sizeof f) (void)lk_flush_ctrl(l, fd);
      if (lk_queue_ctrl(l, f, sizeof f) == 0) {
        l->failover_owed = false;
        (void)lk_flush_ctrl(l, fd);
      }
    }
  }
  if (!l->failover_owed && l->peer_lost_owed) {
    int rc = answer_peer_locked(l, fd, l->peer_lost_at);
    if (rc != -EAGAIN) l->peer_lost_owed = false;
    if (rc == -EPROTO) lk_fail_tx(l, rc, "the peer's FAILOVER names bytes we never put in its ring");
  }
}

/* The peer's FAILOVER(at) came. rx_lock held. */
int lk_peer_lost_locked(r2s_link_t *l, int fd, uint64_t at)
{
  if (!TPS(l)) return -EPROTO;
  r2s__lock(&l->tx_lock);
  int rc = 0;
  if (l->peer_lost) {
    rc = -EPROTO; /* one FAILOVER a connection */
  } else {
    l->peer_lost = true;
    l->peer_lost_at = at;
    l->peer_lost_owed = true;
    lk_lose_locked(l, fd);
    lk_failover_owed_locked(l, fd);
  }
  lk_tx_unlock(l, fd);
  return rc;
}

/* Pushes the backlog: 0 when it has all gone, -EAGAIN while some is left.
 * tx_lock held, our PLAIN sent. */
int lk_flush_backlog_locked(r2s_link_t *l, int fd)
{
  while (l->backlog_off < l->backlog_len) {
    ssize_t n = lk_ksend(fd, l->backlog + l->backlog_off, l->backlog_len - l->backlog_off, 0);
    if (n < 0) lk_keep_sock_err(l, n);
    if (n < 0) return (int)n;
    l->backlog_off += (size_t)n;
  }
  free(l->backlog);
  l->backlog = NULL, l->backlog_len = l->backlog_off = 0;
  __atomic_store_n(&l->backlog_left, 0, __ATOMIC_RELEASE);
  lk_changed(l);
  lk_settle_plain(l);
  return 0;
}

/* close() or shutdown() of our sending side on a lost link: the peer's
 * FAILOVER says which of our ring bytes it lacks, and those bytes exist
 * nowhere else; our FIN must follow them. Waits for the FAILOVER (reading
 * the peer's frames) and for the backlog to leave, up to 10 s without
 * progress. No lock held. */
void lk_failover_before_close(r2s_link_t *l, int fd)
{
  if (!LOST(l)) return;
  int64_t moved = r2s__now_ns();
  size_t left = SIZE_MAX;
  for (;;) {
    r2s__lock(&l->tx_lock);
    if (l->failover_owed || l->peer_lost_owed) lk_failover_owed_locked(l, fd);
    if (l->backlog) (void)lk_flush_ctrl(l, fd);
    bool awaits = l->tx_state == R2S_TX_RING && !l->peer_lost && !l->tx_shut;
    bool busy = (awaits || l->backlog || l->peer_lost_owed) && !FAILED(l) && !__atomic_load_n(&l->rx_eof, __ATOMIC_ACQUIRE);
    size_t now_left = l->backlog ? l->backlog_len - l->backlog_off : 0;
    lk_tx_unlock(l, fd);
    if (!busy) return;
    int64_t now = r2s__now_ns();
    if (now_left != left) moved = now, left = now_left;
    if (now - moved > 10 * 1000000000ll) {
      r2s__warn("failover at close: the peer did not answer or take our bytes for 10 s (%zu not sent)", now_left);
      return;
    }
    if (awaits) lk_pump_from_sender(l, fd, true);
    struct pollfd p = {.fd = fd, .events = awaits ? POLLIN : POLLOUT};
    r2s__lock_debug_blocking("poll");
    (void)r2s__libc.poll(&p, 1, 100);
  }
}

/* Failover: the channel under the rings failed while the TCP connection
 * lives (RDMA: the device's retries ran out, the queue pair or the device
 * died), and the stream goes on over TCP, neither losing nor repeating a
 * byte (docs/protocol.md, "Failover").
 *
 * An end that learns of the loss (its transport's lost(), from its own
 * calls or its progress thread; the peer's FAILOVER frame; the test knob
 * R2SOCK_FAIL_AFTER) stops its rings, the transport's stop(): our ring
 * ends at rx_lost_at, and no byte written into it later is read; nothing
 * more goes into the peer's. It then sends FAILOVER, the last frame of
 * its send direction: with the stream offset h from which it resends,
 * the head of the peer's ring as it last saw it, followed by the bytes it
 * had put into the ring from h on (unacked(): the peer took nothing past
 * h, so they are still in our copy of its ring; the backlog), then the
 * application's, all plain TCP. A direction still on DATA frames sends
 * FAILOVER "none" and stays on them.
 *
 * The reader of FAILOVER h reads its own ring up to where it ends, then
 * TCP, dropping the first rx_lost_at - h resent bytes: it had them
 * already (h is never past what it took). No end waits for the other:
 * an end that already shut its side down (its FIN is out, so it can send
 * nothing) had its bytes placed before that, and the peer finds the loss
 * by its own device.
 *
 * The backlog is pushed by every call that flushes the control queue
 * (lk_flush_ctrl), and by a thread of its own while the application
 * does not write (a reader waiting for the answer to bytes still in the
 * backlog would wait for ever); close() waits for it, as the bytes exist
 * nowhere else, and exit up to 1 s. */
#include "internal.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
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
  ino_t ino;
  int dup = r2s__keep_fd(fd, &ino);
  if (dup < 0) return; /* the application's own calls push it */
  pthread_t t;
  pthread_attr_t a;
  __atomic_add_fetch(&l->refs, 1, __ATOMIC_ACQ_REL);
  void **args = malloc(3 * sizeof *args);
  bool ok = args && pthread_attr_init(&a) == 0;
  if (ok) {
    args[0] = l, args[1] = (void *)(intptr_t)dup, args[2] = (void *)(uintptr_t)ino;
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

#define NONE UINT64_MAX /* FAILOVER's offset for a direction not in a ring */

/* Our FAILOVER: the last frame of the send direction, with what goes
 * behind it. Returns false while it cannot be queued yet. tx_lock held,
 * our rings stopped. */
static bool send_failover_locked(r2s_link_t *l, int fd)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  if (l->tx_state == R2S_TX_FRAMES) {
    /* Not inside a DATA frame still being sent. The peer's ring never
     * gets our bytes: DATA frames go on. */
    if (l->tx_data_left) return false;
    r2s__frame_u64_encode(R2S_FRAME_FAILOVER, NONE, f, sizeof f);
    if (sizeof l->tx_pending - l->tx_pending_len < sizeof f) (void)lk_flush_ctrl(l, fd);
    if (lk_queue_ctrl(l, f, sizeof f) < 0) return false;
    l->no_ring = true;
    (void)lk_flush_ctrl(l, fd);
    return true;
  }
  /* Plain already (nothing can say it), or our FIN is out: every byte we
   * put was placed before it (the flush waited for the device). */
  if (l->tx_state != R2S_TX_RING || l->tx_shut) return true;
  if (l->plain_unsent) {
    /* Our PLAIN (urgent data) says the ring ends at what we put, which
     * the peer's stopped ring may not hold, and nothing may follow it
     * but plain bytes. */
    lk_fail_tx(l, -ECONNRESET, "the ring's channel failed as the direction went back to TCP");
    return true;
  }
  if (sizeof l->tx_pending - l->tx_pending_len < sizeof f) (void)lk_flush_ctrl(l, fd);
  if (sizeof l->tx_pending - l->tx_pending_len < sizeof f) return false;
  struct iovec iov[2];
  uint64_t from;
  int k = TP(l)->unacked(TPS(l), &from, iov);
  if (k < 0) {
    lk_fail_tx(l, k, "the peer broke its ring's head");
    return true;
  }
  size_t len = 0;
  for (int i = 0; i < k; i++) len += iov[i].iov_len;
  if (len) {
    l->backlog = malloc(len);
    if (!l->backlog) {
      lk_fail_tx(l, -ENOMEM, "no memory for the bytes to resend");
      return true;
    }
    size_t off = 0;
    for (int i = 0; i < k; off += iov[i].iov_len, i++) memcpy(l->backlog + off, iov[i].iov_base, iov[i].iov_len);
    l->backlog_len = len, l->backlog_off = 0;
    __atomic_store_n(&l->backlog_left, 1, __ATOMIC_RELEASE);
  }
  (void)lk_queue_last_frame_locked(l, R2S_FRAME_FAILOVER, R2S_REASON_NONE, from);
  r2s__debug("send direction back on TCP: %zu bytes resent from ring offset %llu", len, (unsigned long long)from);
  (void)lk_flush_ctrl(l, fd);
  if (l->backlog) start_pusher(l, fd);
  return true;
}

void lk_failover_owed_locked(r2s_link_t *l, int fd)
{
  if (l->failover_owed && !FAILED(l) && send_failover_locked(l, fd)) l->failover_owed = false;
}

/* The peer's FAILOVER h (NONE: its direction was not in our ring). rx_lock
 * held. */
int lk_peer_lost_locked(r2s_link_t *l, int fd, uint64_t h)
{
  /* One a connection. A direction in our ring (its RING frame came before
   * this) resends from no further than what we took; one that is not
   * says NONE. */
  bool in_ring = l->rx_state == R2S_RX_RING;
  if (!TPS(l) || l->peer_lost || l->rx_plain_pending || in_ring != (h != NONE) ||
      (in_ring && h > TP(l)->consumed(TPS(l))))
    return -EPROTO;
  l->peer_lost = true;
  r2s__lock(&l->tx_lock);
  lk_lose_locked(l, fd);
  lk_tx_unlock(l, fd);
  if (FAILED(l) || !in_ring) return 0;
  l->rx_plain_pending = true;
  l->rx_plain_at = l->rx_lost_at;
  l->rx_skip = l->rx_lost_at - h;
  return RETRY;
}

/* Drops the resent bytes we had already, as they arrive: true once they
 * are gone (or the stream ended). rx_lock held. */
bool lk_skip_resent(r2s_link_t *l, int fd)
{
  uint8_t junk[16384];
  while (l->rx_skip) {
    ssize_t n = lk_krecv(fd, junk, l->rx_skip < sizeof junk ? (size_t)l->rx_skip : sizeof junk, MSG_DONTWAIT);
    if (n == -EAGAIN) return false;
    if (n <= 0) { /* the end, or an error the application's next read gets from the kernel's keeper */
      if (n < 0) lk_keep_sock_err(l, n);
      l->rx_skip = 0;
      break;
    }
    l->rx_skip -= (uint64_t)n;
  }
  return true;
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

/* close() or shutdown() of our sending side on a lost link: the resent
 * bytes exist nowhere else, and our FIN must follow them. Waits while the
 * peer takes them, up to 10 s without progress. No lock held. */
void lk_failover_before_close(r2s_link_t *l, int fd)
{
  if (!LOST(l)) return;
  int64_t moved = r2s__now_ns();
  size_t left = SIZE_MAX;
  for (;;) {
    r2s__lock(&l->tx_lock);
    if (l->failover_owed) lk_failover_owed_locked(l, fd);
    if (l->backlog) (void)lk_flush_ctrl(l, fd);
    bool busy = (l->backlog || l->failover_owed) && !FAILED(l);
    size_t now_left = l->backlog ? l->backlog_len - l->backlog_off : 0;
    lk_tx_unlock(l, fd);
    if (!busy) return;
    int64_t now = r2s__now_ns();
    if (now_left != left) moved = now, left = now_left;
    if (now - moved > 10 * 1000000000ll) {
      r2s__warn("failover at close: the peer took none of our resent bytes for 10 s (%zu not sent)", now_left);
      return;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    r2s__lock_debug_blocking("poll");
    (void)r2s__libc.poll(&p, 1, 100);
  }
}

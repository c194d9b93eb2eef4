/* Urgent data and the TCP options the link shadows: the application's
 * own urgent bytes, SIOCATMARK and POLLPRI past the shim's marks,
 * SO_OOBINLINE, and TCP_NODELAY/TCP_CORK while the shim sends frames. */
#include "internal.h"

#include <netinet/tcp.h>

#include <arpa/inet.h>

#include "libc.h"

#include "tcphist.h"

/* The application's first byte on the connection is urgent, and our
 * hello is still owed (an accepting end that has not written yet): the
 * hello goes first, as in front of any first byte of a server that speaks
 * first, so that the application's byte does not stand at the start of
 * the stream, where one of a hello's value would pass for it
 * (lk_shim_urgent_here). Whether the client runs the shim need not be known:
 * its hello may still be on its way (a nonblocking connect is seen
 * complete late), and at a plain client the kernel steps over our hello,
 * unread, when the application's urgent byte replaces it. Only while the
 * kernel says that no byte ever left: a hello behind bytes would not be
 * at the start, and, replaced, would be left in the stream as data.
 * tx_lock held. */
static void greet_before_urgent_locked(r2s_link_t *l, int fd)
{
  if (!l->hello_owed || l->tp || l->interlude_sent || !r2s__tcp_never_sent(fd)) return;
  const unsigned char hello = lk_hello_byte(l);
  ssize_t n = lk_ksend(fd, &hello, 1, MSG_OOB);
  if (n == 1)
    __atomic_store_n(&l->hello_owed, false, __ATOMIC_RELEASE);
  else
    lk_keep_sock_err(l, n);
}

void r2s__link_app_oob(r2s_link_t *l, int fd)
{
  /* If the peer already switched towards us, it must hear that we passed
   * its mark (the interlude), or its own urgent data would have to wait
   * forever. */
  r2s__lock(&l->tx_lock);
  l->app_oob = true;
  lk_keep_tx_plain_locked(l, fd, R2S_REASON_APP_OOB);
  lk_tx_unlock(l, fd);
}

static int set_oobinline(r2s_link_t *l, int fd, bool on)
{
  r2s__lock(&l->rx_lock);
  bool kept = l->rx_state != R2S_RX_PLAIN || __atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE);
  if (kept) __atomic_store_n(&l->app_oobinline, on, __ATOMIC_RELEASE);
  lk_oobinline_to_kernel(l, fd);
  lk_settle_plain(l);
  lk_rx_unlock(l, fd);
  if (kept) return 0;
  int v = on;
  return r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, sizeof v) < 0 ? -errno : 0;
}

static int set_tcp_opt(r2s_link_t *l, int fd, int name, int v)
{
  r2s__lock(&l->tx_lock);
  int rc = 0;
  if (carries_frames(l)) {
    if (name == TCP_NODELAY)
      l->tcp_nodelay = v != 0;
    else
      l->tcp_cork = v != 0;
  } else if (r2s__libc.setsockopt(fd, IPPROTO_TCP, name, &v, sizeof v) < 0) {
    rc = -errno;
  }
  lk_tx_unlock(l, fd);
  return rc;
}

int r2s__link_setsockopt(r2s_link_t *l, int fd, int level, int name, int v)
{
  if (level == SOL_SOCKET && name == SO_OOBINLINE) return set_oobinline(l, fd, v != 0);
  if (level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK)) return set_tcp_opt(l, fd, name, v);
  return -ENOPROTOOPT;
}

int r2s__link_getsockopt(r2s_link_t *l, int level, int name)
{
  if (level == SOL_SOCKET && name == SO_OOBINLINE)
    return __atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) ? 1 : -1;
  if (level != IPPROTO_TCP || (name != TCP_NODELAY && name != TCP_CORK)) return -1;
  r2s__lock(&l->tx_lock);
  int v = !carries_frames(l) ? -1 : name == TCP_NODELAY ? l->tcp_nodelay : l->tcp_cork;
  lk_tx_unlock(l, -1);
  return v;
}

bool r2s__link_urgent_is_shims(r2s_link_t *l, int fd)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN ||
      __atomic_load_n(&l->rx_plain_pending, __ATOMIC_ACQUIRE))
    return false;
  int urg = lk_urgent_peek(fd);
  return urg >= 0 && lk_shim_urgent_here(fd, urg, -1);
}

int lk_atmark(r2s_link_t *l, int fd)
{
  /* Control frames in front of the application's next byte (a PLAIN frame
   * above all) are read first: the mark is judged where the application
   * really is. */
  lk_pump_from_sender(l, fd, false);
  r2s__lock(&l->rx_lock);
  if (l->rx_state == R2S_RX_RING && l->rx_plain_pending) {
    size_t want = 1;
    (void)lk_ring_ends_here(l, fd, &want);
  }
  int st = l->rx_state, v = 0;
  size_t ahead = r2s__readahead_len(&l->rx_ahead);
  lk_rx_unlock(l, fd);
  /* Bytes read ahead lie in front of any mark the kernel knows: the
   * application reaches it only after reading them. */
  if (ahead) return 0;
  if ((st == R2S_RX_PLAIN || st == R2S_RX_PROBE || st == R2S_RX_PREMARK) &&
      r2s__libc.ioctl(fd, SIOCATMARK, &v) < 0)
    return -errno;
  /* In PROBE/PREMARK a mark of ours (hello) is not the application's. */
  if (v && st != R2S_RX_PLAIN) {
    int urg = lk_urgent_peek(fd);
    if (urg >= 0 && lk_shim_urgent_here(fd, urg, 1)) v = 0;
  }
  return v; /* ring or frames first: the application is not at a mark */
}

ssize_t r2s__link_send_oob(r2s_link_t *l, int fd, const void *buf, size_t len, int flags, bool nonblock)
{
  lk_unquiet(l);
  r2s__lock(&l->tx_lock);
  int st = l->tx_state;
  greet_before_urgent_locked(l, fd);
  if (st == R2S_TX_PROBE) {
    if (!l->tcp_reason) l->tcp_reason = R2S_REASON_APP_OOB;
    set_tx(l, R2S_TX_PLAIN);
    lk_settle_plain(l);
    st = R2S_TX_PLAIN;
  }
  (void)lk_send_interlude_locked(l, fd);
  if (st == R2S_TX_PLAIN && !l->interlude_sent && !l->interlude_owed) {
    l->app_urgent_sent = true; /* before it leaves: no interlude may follow */
    lk_tx_unlock(l, fd);
    ssize_t n = r2s__libc.send(fd, buf, len, flags);
    return n < 0 ? -errno : n;
  }
  /* The peer must be past our switch mark before a new urgent pointer can
   * replace it (Linux keeps one): wait for its RING or DECLINE. */
  while (!l->peer_passed_mark && !FAILED(l)) {
    /* Our interlude, or its rest, if the socket was full. */
    if (lk_send_interlude_locked(l, fd) == 0) (void)lk_flush_ctrl(l, fd);
    lk_tx_unlock(l, fd);
    lk_pump_from_sender(l, fd, true);
    r2s__lock(&l->tx_lock);
    if (l->peer_passed_mark || FAILED(l)) break;
    if (nonblock) {
      lk_tx_unlock(l, fd);
      return -EAGAIN;
    }
    lk_tx_unlock(l, fd);
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    r2s__libc.poll(&p, 1, 10);
    r2s__lock(&l->tx_lock);
  }
  ssize_t rc = FAILED(l) ? FAILED(l) : 0;
  if (!rc && l->tx_data_left) rc = -EAGAIN; /* a DATA frame is half sent */
  if (!rc && l->tx_state == R2S_TX_PLAIN) { /* after an interlude: nothing to end */
    l->app_urgent_sent = true;
    lk_tx_unlock(l, fd);
    ssize_t n = r2s__libc.send(fd, buf, len, flags);
    return n < 0 ? -errno : n;
  }
  /* Once queued, the PLAIN frame is ours to send, whatever this call
   * returns: the ring or the frames end where it says (plain_unsent keeps
   * every other byte out), and the flush that empties the queue turns the
   * direction plain (lk_flush_ctrl). A retry finds it queued, or gone. */
  if (!rc && !l->plain_unsent) rc = lk_queue_plain_locked(l, R2S_REASON_APP_OOB);
  /* The PLAIN frame must be in the socket before the urgent byte. The
   * wait for room drops tx_lock: plain_unsent keeps every other byte out
   * meanwhile (lk_queue_ctrl, lk_tx_in_ring), and a sender that
   * pushes the frame's rest itself turns the direction plain, which the
   * loop then finds with nothing pending. */
  while (!rc && l->tx_pending_len) {
    rc = lk_flush_ctrl(l, fd);
    if (rc == -EAGAIN && !nonblock) {
      lk_tx_unlock(l, fd);
      struct pollfd p = {fd, POLLOUT, 0};
      r2s__libc.poll(&p, 1, 100);
      r2s__lock(&l->tx_lock);
      rc = FAILED(l);
    }
  }
  if (rc) {
    lk_tx_unlock(l, fd);
    return rc;
  }
  l->app_urgent_sent = true;
  lk_tx_unlock(l, fd);
  ssize_t n = r2s__libc.send(fd, buf, len, flags);
  return n < 0 ? -errno : n;
}

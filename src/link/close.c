/* The end of a link: shutdown, and the last close, which leaves the
 * socket as TCP would (a clean end, or a reset where bytes were left
 * unread) and hands a closed connection to the reaper (reaper.h). */
#include "internal.h"

#include <netinet/tcp.h>

#include <arpa/inet.h>

#include <sys/ioctl.h>

#include "libc.h"

#include "reaper.h"

/* Before a flush that waits for the peer (transport.h): a peer whose FIN
 * we hold (CLOSE_WAIT) may be a process killed with bytes of ours still in
 * flight, and its device never acknowledges them; a doorbell makes its
 * kernel answer with a reset at once, instead of the flush waiting its
 * whole bound. A live peer that only shut down its side reads the
 * doorbell as nothing. tx_lock held; the flush itself waits with no lock
 * held (it may take up to its bound). */
static void before_flush_locked(r2s_link_t *l, int fd)
{
  if (TP(l)->flush_waits_for_peer) {
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    if (r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) == 0 && ti.tcpi_state == TCP_CLOSE_WAIT)
      lk_send_doorbell_locked(l, fd);
  }
}

int r2s__link_shutdown(r2s_link_t *l, int fd, int how)
{
  lk_unquiet(l);
  if (how == SHUT_RD || how == SHUT_RDWR) {
    r2s__lock(&l->rx_lock);
    __atomic_store_n(&l->rx_shut, true, __ATOMIC_RELEASE);
    lk_rx_unlock(l, fd);
  }
  if (how == SHUT_WR || how == SHUT_RDWR) {
    lk_failover_before_close(l, fd);
    r2s__lock(&l->tx_lock);
    (void)lk_flush_ctrl(l, fd);
    bool in_ring = l->tx_state == R2S_TX_RING;
    if (in_ring) {
      if (!l->tx_shut) TP(l)->close_tx(TPS(l));
      before_flush_locked(l, fd);
    }
    /* From here no write goes in (-EPIPE), so the ring's end is fixed
     * while the flush waits without the lock. */
    l->tx_shut = true;
    lk_tx_unlock(l, fd);
    if (in_ring) {
      TP(l)->flush(TPS(l));
      r2s__lock(&l->tx_lock);
      if (TP(l)->take_peer_rx_sleeper(TPS(l))) lk_send_doorbell_locked(l, fd);
      lk_tx_unlock(l, fd);
    }
  }
  /* The kernel's FIN follows everything queued: the peer sees the end of
   * the stream after the last frame, and after the last ring byte (the
   * transport's flush made sure those are in the peer's ring). A PLAIN
   * frame still queued is cut off, but no byte lies behind it: the peer
   * reads its ring or frames to their end, as without the frame. */
  return r2s__libc.shutdown(fd, how) < 0 ? -errno : 0;
}

/* The application asked for an abortive close (SO_LINGER on, 0 s): the
 * kernel answers the close with a reset, and the peer must see ECONNRESET
 * after the bytes it already has, as on TCP, not the orderly end the
 * reaper would give it. */
static bool aborts(int fd)
{
  struct linger lg = {0, 0};
  socklen_t len = sizeof lg;
  return r2s__libc.getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 && lg.l_onoff && lg.l_linger == 0;
}

/* The reaper's reader (reaper.h): the closed connection is read on as the
 * application would, so that the peer's frames are taken as frames and an
 * application byte of its, which reaches a socket closed on TCP, is told
 * from them. */
static ssize_t reap_read(void *arg, int fd)
{
  r2s_link_t *l = arg;
  char buf[4096];
  struct iovec v = {buf, sizeof buf};
  ssize_t n = r2s__link_recv(l, fd, &v, 1, 0, NULL);
  return n == -EINTR ? -EAGAIN : n;
}

static void reap_release(void *arg)
{
  r2s__link_free(arg);
}

void r2s__link_close(r2s_link_t *l, int fd, bool used)
{
  r2s__lock(&l->rx_lock);
  l->closing = true;
  /* Shim bytes the application never caused a read of (the peer's hello,
   * its switch mark and handshake, doorbells, a RING after the last DATA
   * frame) must not stay in the socket: the kernel answers a close with
   * unread bytes by a reset, and the peer would see ECONNRESET where plain
   * TCP gives it a clean end. Application bytes left unread are left
   * alone: there the reset is TCP's own. */
  for (int guard = 0; guard < 64 && !l->rx_eof && !FAILED(l); guard++) {
    int st = l->rx_state;
    if (st == R2S_RX_PROBE || st == R2S_RX_PREMARK) {
      int urg = -EINVAL;
      if (lk_mark_here(fd, &urg) != 1) break;
      if (urg == R2S_SWITCH_BYTE) {
        set_rx(l, R2S_RX_FRAMES);
        continue;
      }
      char c;
      /* Not a switch mark (above): a hello, if the shim's. */
      if (urg >= 0 && lk_note_urgent(l, fd, urg, 1) && lk_krecv(fd, &c, 1, MSG_PEEK) == -EAGAIN)
        (void)lk_krecv(fd, NULL, 1, MSG_TRUNC); /* takes the lone hello */
      break;
    }
    if (st == R2S_RX_RING) {
      /* A lie read only now is still a lie: it is reported, and the
       * connection is not given an orderly close. */
      lk_read_control_locked(l, fd, false);
      /* A failover's resent bytes that we had already (failover.c) are
       * the shim's, not the application's: those here go now. */
      size_t one = 1;
      if (l->rx_plain_pending && l->rx_skip) (void)lk_ring_ends_here(l, fd, &one);
      break;
    }
    if (st != R2S_RX_FRAMES || l->rx_data_left) break;
    r2s_frame_hdr_t h;
    int t = lk_read_frame(l, fd, &h);
    if (t <= 0 || (t == R2S_FRAME_DATA && h.len)) {
      if (t == R2S_FRAME_DATA) l->rx_data_left = h.len;
      break;
    }
    if (t != R2S_FRAME_DATA) {
      /* RING: the frames behind it are read on the next turn. */
      int rc = lk_handle_control(l, fd, &h);
      if (rc < 0 && rc != RETRY) {
        lk_fail(l, rc, "bad frame from the peer");
        break;
      }
    }
    if (l->rx_plain_pending || l->rx_state == R2S_RX_PLAIN) break;
  }
  /* The application read the peer's end of the stream (not one our own
   * shutdown(SHUT_RD) made up): the peer can send nothing more, not even a
   * frame, so the kernel's own close is the orderly one. */
  bool peer_done = l->rx_eof && !l->rx_shut;
  /* Or the peer can send nothing that plain TCP would not meet with a
   * reset as well. Its hello came, saying it switches only once the
   * connection moved 2^k bytes as it counts them (sent plus received). It
   * received at most what we sent, and what it sent beyond what we read
   * reaches a closed socket, which resets it as under plain TCP. So while
   * our count is below its floor, a switch mark of its can only come in
   * front of new bytes of its application, and none answers ours: we never
   * switched (checked below, under tx_lock). The first end to close then
   * needs no reaper either. */
  /* As the kernel's close does for a socket: the peer's writes into our
   * ring lk_fail from now on, and bytes of its that the application left
   * unread in the ring make the close a reset. */
  bool ring_unread = false;
  if (used && TPS(l) && !FAILED(l)) {
    ssize_t left = TP(l)->avail(TPS(l));
    size_t one = 1;
    ring_unread =
        left > 0 && !(l->rx_state == R2S_RX_RING && l->rx_plain_pending && lk_ring_ends_here(l, -1, &one));
    if (TP(l)->close_rx) TP(l)->close_rx(TPS(l));
  }
  bool peer_quiet = (l->rx_state == R2S_RX_PROBE || l->rx_state == R2S_RX_PREMARK) &&
                    __atomic_load_n(&l->tx_plain_bytes, __ATOMIC_RELAXED) + l->rx_consumed <
                        r2s__hello_floor(__atomic_load_n(&l->peer_hello, __ATOMIC_RELAXED));
  lk_rx_unlock(l, fd);
  lk_failover_before_close(l, fd);
  r2s__lock(&l->tx_lock);
  (void)lk_flush_ctrl(l, fd);
  /* Our FIN must not overtake our last ring bytes (RDMA writes still in
   * flight): the peer would read the end of the stream before them. The
   * last fd is being closed: no write of the application's follows. */
  bool in_ring = l->tx_state == R2S_TX_RING;
  if (in_ring) before_flush_locked(l, fd);
  peer_quiet = peer_quiet && l->tx_state == R2S_TX_PROBE && !l->tp;
  lk_tx_unlock(l, fd);
  if (in_ring) TP(l)->flush(TPS(l));
  /* The peer's hello or frames may still be on their way to us: an orderly
   * close in the background (reaper.h). Unless the application left its
   * own bytes unread: then the kernel's reset is what TCP does. Nor for a
   * socket we never used (link.h): others may still hold it. */
  /* While the peer's bytes come through the ring, whatever TCP still holds
   * (or brings between the drain above and now) is frames. So it is on
   * frames when the loop above stopped between two of them with no
   * application byte pending: the peer, which does not know we close,
   * sends its RING, READY or a doorbell at any time, and refusing those
   * the reaper let the kernel reset the connection (rr_check's short
   * request/response connections over shared memory, 2026-11-23: 4 runs
   * of 5 had a reset in 200 connections). Application bytes behind them
   * are dropped unread, as in the ring. Otherwise unread bytes may be the
   * application's. */
  int unread = 0;
  int rx = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
  bool only_frames = (rx == R2S_RX_RING || (rx == R2S_RX_FRAMES && !l->rx_data_left && !l->rx_hdr_len)) &&
                     !l->rx_plain_pending;
  /* So it is when the application read our ring to its end and only
   * resent bytes it had already may be in front of it, or on their way:
   * the reaper drops them as it reads on, and resets at an application
   * byte behind them, as the kernel would. */
  if (rx == R2S_RX_RING && l->rx_plain_pending && l->rx_skip && TPS(l) &&
      TP(l)->consumed(TPS(l)) >= l->rx_plain_at)
    only_frames = true;
  if (r2s__readahead_len(&l->rx_ahead) || ring_unread) {
    /* Application bytes read ahead and never read: TCP would answer the
     * close with a reset, as it does for bytes left in the socket. The
     * kernel no longer has them, so it is asked to. */
    struct linger abort_now = {1, 0};
    (void)r2s__libc.setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof abort_now);
  } else if (used && !peer_done && !peer_quiet && !FAILED(l) && !aborts(fd) &&
             (only_frames || (r2s__libc.ioctl(fd, FIONREAD, &unread) == 0 && unread == 0))) {
    __atomic_add_fetch(&l->refs, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&l->reaped, true, __ATOMIC_RELEASE);
    __atomic_store_n(&l->on_upgrade, NULL, __ATOMIC_RELEASE);
    r2s_reap_reader_t rd = {reap_read, reap_release, l};
    if (r2s__reaper_adopt(fd, &rd) == 0)
      R2S_STAT_INC(closes_reaped);
    else
      r2s__link_free(l);
  }
}

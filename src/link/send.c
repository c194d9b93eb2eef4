/* The send path: one nonblocking write of the application's stream in
 * each send state (probing for the peer, DATA frames, the peer's ring,
 * plain TCP), and what a write meets once the peer closed. */
#include "internal.h"

#include "iovec.h"
#include "libc.h"

/* When the send side looks for the peer's hello (or handshake) next: at
 * every write at first, then at doubling intervals capped at 64 writes, so
 * a plain peer costs one extra system call per 64 writes at most, and bytes
 * sent before a shim peer is noticed stay few. Large writes would make 64
 * of them many bytes: the hello is also looked for once PROBE_BYTES went
 * since the last look, or an eighth of what went before it (so a plain
 * peer still costs O(log n) looks over a long stream, and what crosses TCP
 * after the peer's hello arrived stays within an eighth of what crossed it
 * before). The hello is looked for only once the policy would let a switch
 * follow it: before that, what a probe learns changes nothing here (the
 * peer's hello is taken where it stands, by a read or the close), and a
 * short connection would pay a system call on its first write for
 * nothing. */
#define PROBE_BYTES (256u << 10)

static uint64_t next_probe(uint64_t writes)
{
  if (writes < 16) return writes + 1;
  uint64_t step = writes < 64 ? writes : 64;
  return writes + step;
}

static bool hello_probe_due(r2s_link_t *l)
{
  uint64_t since = l->tx_plain_bytes - l->tx_probed_bytes, eighth = l->tx_probed_bytes / 8;
  return ++l->tx_writes >= l->tx_probe_at || since >= (eighth > PROBE_BYTES ? eighth : PROBE_BYTES);
}

static ssize_t tx_plain(int fd, const struct iovec *iov, int cnt, int flags)
{
  struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
  ssize_t n = r2s__libc.sendmsg(fd, &m, flags | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

static ssize_t tx_frames(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  size_t total = r2s__iov_total(iov, cnt);
  if (l->tx_data_left) { /* finish the DATA frame in flight first */
    struct iovec v[64];
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)lk_trim_iov(v, iov, cnt, l->tx_data_left)};
    ssize_t n = r2s__libc.sendmsg(fd, &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return -errno;
    l->tx_data_left -= (uint32_t)n;
    return n;
  }
  size_t len = total < R2S_FRAME_DATA_MAX ? total : R2S_FRAME_DATA_MAX;
  uint8_t hdr[R2S_FRAME_HDR_LEN];
  r2s__frame_hdr_put(hdr, sizeof hdr, R2S_FRAME_DATA, (uint32_t)len);
  struct iovec v[65];
  v[0] = (struct iovec){hdr, sizeof hdr};
  int k = lk_trim_iov(v + 1, iov, cnt, len);
  struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)k + 1};
  ssize_t n = r2s__libc.sendmsg(fd, &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0) return -errno;
  if ((size_t)n < sizeof hdr) { /* part of the header: the rest goes first next time */
    lk_queue_ctrl(l, hdr + n, sizeof hdr - (size_t)n);
    l->tx_data_left = (uint32_t)len;
    return -EAGAIN;
  }
  size_t app = (size_t)n - sizeof hdr;
  l->tx_data_left = (uint32_t)(len - app);
  return (ssize_t)app;
}

/* The kernel's error for a socket whose peer is gone (its reset, or the
 * one a call of the shim's took, lk_keep_sock_err), or EPIPE once that was
 * reported. */
static ssize_t gone_error(r2s_link_t *l, int fd)
{
  int kept = __atomic_exchange_n(&l->sock_err, 0, __ATOMIC_ACQ_REL);
  if (kept) return kept;
  int err = 0;
  socklen_t len = sizeof err;
  if (r2s__libc.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err) return -err;
  return -EPIPE;
}

/* The peer's application closed the connection: its end marked our ring
 * closed (close_rx). Bytes TCP sends to a closed socket are answered with
 * a reset, which ends every later call; the write that sent them, made
 * before the reset could come back, succeeded. So does the first write
 * here (its bytes are lost, as TCP's), unless the close itself was a
 * reset: the kernel has it already, or the peer left bytes of ours unread
 * in its ring, which makes its close one (r2s__link_close), whose reset
 * is then on its way. tx_lock held; returns RETRY having dropped it to
 * wait for that reset. */
#define RESET_WAIT_MS 50

static ssize_t peer_closed_locked(r2s_link_t *l, int fd, size_t len)
{
  struct pollfd p = {fd, 0, 0};
  (void)r2s__libc.poll(&p, 1, 0);
  if ((p.revents & POLLERR) || __atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&l->peer_gone, 1, __ATOMIC_RELEASE);
    return gone_error(l, fd);
  }
  bool reset = TP(l)->unread && TP(l)->unread(TPS(l)) > 0;
  if (reset && !l->reset_awaited) {
    /* The peer's kernel sends it right after the close: the error the
     * application gets is then the kernel's, reported once, as on TCP. */
    l->reset_awaited = true;
    lk_tx_unlock(l, fd);
    (void)r2s__libc.poll(&p, 1, RESET_WAIT_MS);
    r2s__lock(&l->tx_lock);
    return RETRY;
  }
  __atomic_store_n(&l->peer_gone, 1, __ATOMIC_RELEASE);
  if (reset) return -ECONNRESET;
  return len ? (ssize_t)len : -EPIPE;
}

/* The ring case, the common one of a carried connection, first: our
 * writes go into the peer's ring (lk_tx_in_ring), no control frame
 * waits to go first, no error waits for the application, and the ring
 * takes at least one byte. Then this is all a write does: what the
 * general path below would do in that case (R2S_TX_RING, where flags do
 * not matter), without its layers, which each cost a ring round trip
 * under emulation (docs/rdma.md, "A short way for ring reads and
 * writes"). Returns the bytes written, or 0 for the general path, having
 * changed nothing. tx_lock held. */
static inline ssize_t send_ring_first(r2s_link_t *l, int fd, const struct iovec *iov, int cnt,
                                      r2s_link_moved_t *mv)
{
  if (!lk_tx_in_ring(l) || l->tx_pending_len || l->tx_shut || FAILED(l) || r2s__opt.fail_after ||
      __atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE))
    return 0;
  ssize_t n = TP(l)->put(TPS(l), iov, cnt, 0, r2s__iov_total(iov, cnt));
  if (n <= 0) return 0; /* no room, the peer's end, a failure: the general path's to handle */
  if (mv) mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
  if (TP(l)->take_peer_rx_sleeper(TPS(l))) lk_send_doorbell_locked(l, fd);
  return n;
}

ssize_t r2s__link_send(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv)
{
  if (mv) *mv = (r2s_link_moved_t){0};
  lk_unquiet(l);
  r2s__lock(&l->tx_lock);
  ssize_t n = send_ring_first(l, fd, iov, cnt, mv);
  if (n > 0) {
    lk_tx_unlock(l, fd);
    return n;
  }
  /* The kernel checks for an error before it takes a byte. */
  n = __atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE) ? -EAGAIN : RETRY;
  while (n == RETRY) {
    if (FAILED(l)) {
      n = -EPIPE;
      break;
    }
    if (l->tx_shut) {
      n = -EPIPE;
      break;
    }
    switch (l->tx_state) {
    case R2S_TX_PROBE:
      if (!__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE) && lk_policy_allows_switch(l) && hello_probe_due(l)) {
        int urg = lk_urgent_peek(fd);
        if ((urg >= 0 && lk_note_urgent(l, fd, urg, -1)) || urg == -EAGAIN)
          __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
        l->tx_probe_at = next_probe(l->tx_writes);
        l->tx_probed_bytes = l->tx_plain_bytes;
      }
      if (__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE) && lk_policy_allows_switch(l)) {
        int rc = lk_switch_tx(l, fd);
        if (rc == -EINPROGRESS) { /* our offer is ours to make, with no lock held */
          lk_tx_unlock(l, fd);
          lk_make_offer(l, fd);
          r2s__lock(&l->tx_lock);
          continue; /* everything looked at again */
        }
        if (rc == 0) {
          l->tx_writes = 0, l->tx_probe_at = 1;
          continue;
        }
      }
      if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN) {
        set_tx(l, R2S_TX_PLAIN);
        lk_settle_plain(l);
      } else {
        (void)lk_greet_locked(l, fd); /* a server that speaks first: the hello goes first */
      }
      n = tx_plain(fd, iov, cnt, flags);
      if (n > 0) __atomic_store_n(&l->tx_plain_bytes, l->tx_plain_bytes + (uint64_t)n, __ATOMIC_RELAXED);
      break;
    case R2S_TX_FRAMES: {
      int rc = lk_flush_ctrl(l, fd);
      if (rc < 0) {
        n = rc;
        break;
      }
      if (l->tx_state != R2S_TX_FRAMES) continue; /* our PLAIN frame left: TCP from here */
      /* The peer's handshake (or READY) may be waiting unread on our side.
       * Looked for at doubling intervals, so a peer that never sends one
       * costs little, and at least every PROBE_BYTES, so large writes do
       * not run on over TCP long after the ring is ready. */
      if (lk_awaits_peer(l) && (++l->tx_writes >= l->tx_probe_at || l->tx_frame_bytes >= PROBE_BYTES)) {
        l->tx_probe_at = next_probe(l->tx_writes);
        l->tx_frame_bytes = 0;
        lk_tx_unlock(l, fd); /* lock order: rx before tx */
        lk_pump_from_sender(l, fd, true);
        r2s__lock(&l->tx_lock);
        continue;
      }
      lk_try_ring_tx(l, fd);
      /* Into the ring, or back to plain TCP behind a PLAIN frame (which may
       * still wait in the queue: nothing may pass it). */
      if (l->tx_state != R2S_TX_FRAMES || l->plain_unsent) continue;
      n = tx_frames(l, fd, iov, cnt, flags);
      if (n > 0) l->tx_frame_bytes += (uint64_t)n;
      break;
    }
    case R2S_TX_RING: {
      if (!LOST(l) && (lk_fail_after_due(l) || lk_channel_lost(l))) {
        lk_tx_unlock(l, fd); /* lock order: rx before tx */
        lk_lose(l, fd);
        r2s__lock(&l->tx_lock);
        continue;
      }
      int rc = lk_flush_ctrl(l, fd);
      if (rc < 0 && (rc != -EAGAIN || !lk_tx_in_ring(l))) {
        n = rc;
        break;
      }
      if (l->tx_state != R2S_TX_RING) continue; /* our PLAIN frame left: TCP from here */
      if (LOST(l)) { /* our FAILOVER waits for room (failover.c) */
        n = -EAGAIN;
        break;
      }
      n = TP(l)->put(TPS(l), iov, cnt, 0, r2s__iov_total(iov, cnt));
      if (n == -EPIPE)
        n = peer_closed_locked(l, fd, r2s__iov_total(iov, cnt));
      else if (n == 0)
        n = __atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE) ? gone_error(l, fd) : -EAGAIN;
      if (n > 0 && mv) mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
      if (n > 0 && TP(l)->take_peer_rx_sleeper(TPS(l))) lk_send_doorbell_locked(l, fd);
      /* The ring cannot take more (shm: no room in /dev/shm for its
       * rest): the bytes go on over TCP, behind the ones in the ring. A
       * full control queue is flushed first, by a retry. */
      if (n == -ENOSPC) {
        n = lk_queue_plain_locked(l, R2S_REASON_NO_RESOURCES) == 0 ? RETRY : -EAGAIN;
        continue;
      }
      if (n == -EPROTO) { /* the application sees a reset, as on TCP */
        lk_fail_tx(l, (int)n, "the peer broke its ring");
        n = -ECONNRESET;
      }
      break;
    }
    default: {
      /* An interlude still owed (its mark found the socket full) or half
       * sent goes first: no application byte may land inside its frames. */
      int rc = l->tx_pending_len || l->backlog ? lk_flush_ctrl(l, fd) : 0;
      if (!rc) rc = lk_send_interlude_locked(l, fd);
      if (!rc && l->tx_pending_len) rc = lk_flush_ctrl(l, fd);
      n = rc == -EAGAIN ? rc : tx_plain(fd, iov, cnt, flags);
    }
    }
  }
  n = lk_give_sock_err(l, n);
  if (n < 0) lk_settle_plain(l);
  lk_tx_unlock(l, fd);
  return n;
}

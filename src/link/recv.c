/* The receive path: one nonblocking read of the application's stream in
 * each receive state (in front of the switch mark, DATA frames, the ring,
 * plain TCP), behind the bytes read ahead. */
#include "internal.h"

#include <sys/ioctl.h>

#include "iovec.h"
#include "libc.h"

/* PROBE and PREMARK: application bytes, while watching for the peer's
 * urgent marks with the peek-then-mark procedure of docs/protocol.md. */
ssize_t lk_rx_premark(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  /* The bytes up to the next mark are counted (MSG_TRUNC), not copied:
   * behind a switch mark they are frames, and a peek into the caller's
   * buffer left them there, past the bytes the read then returned, where
   * a program may keep bytes of its own (CPython's
   * testRecvmsgIntoScatter found ours). At most 64 entries of the
   * caller's iovec are filled (lk_trim_iov): a short read. */
  struct iovec v[64];
  int k = lk_trim_iov(v, iov, cnt, SIZE_MAX);
  ssize_t n = lk_krecv(fd, NULL, r2s__iov_total(v, k), MSG_PEEK | MSG_TRUNC);
  if (n < 0) {
    /* Nothing to read: a mark may stand at the reader with nothing behind
     * it yet. It is news only where a switch could follow the peer's
     * hello now (r2s__link_wants_lone_marks: the reader's wait watches
     * POLLPRI then, and must find the mark). Elsewhere the hello is taken
     * with the bytes that follow it (or by the close), a switch mark with
     * the HANDSHAKE behind it, and a plain peer's lone urgent byte leaves
     * a read on TCP waiting too; a sender that looks for the switch mark
     * alone does so itself (lk_read_control_locked). */
    if (n != -EAGAIN || !r2s__link_wants_lone_marks(l)) return n;
  }
  int urg = -EINVAL, mark;
  if (l->rx_state == R2S_RX_PROBE && n > 0) {
    /* Bytes at the reader, and the peer not known yet: first whether any
     * urgent byte came at all. None (EINVAL) is the answer for a plain
     * peer, and then no mark stands at the reader either; otherwise where
     * the mark stands, and its byte read again behind a SIOCATMARK of 1
     * (lk_mark_here). The value read first serves a mark ahead: the bytes
     * in front of it show that the peer's urgent byte came. */
    urg = lk_urgent_peek(fd);
    mark = urg == -EINVAL ? 0 : lk_mark_here(fd, &urg);
  } else {
    /* Nothing to read, the end of the stream, or the peer known: only a
     * mark at the reader matters. One ahead of it has bytes in front,
     * which the peek returned, and its byte is seen once the reader gets
     * there. */
    mark = lk_mark_here(fd, &urg);
  }
  if (mark < 0) return mark;
  /* A reset connection keeps its unread bytes, which plain TCP delivers
   * before it reports the reset, but the kernel no longer answers for its
   * urgent byte (ENOTCONN). Bytes in front of the mark are the
   * application's whatever the mark is; at the mark, the byte itself says
   * whether frames follow. */
  if (urg == -ENOTCONN) urg = mark ? lk_urgent_after_reset(fd) : -EINVAL;
  if (urg < 0 && urg != -EINVAL && urg != -EAGAIN) return urg == -ENOTCONN ? -ECONNRESET : urg;
  if (urg >= 0 && !lk_note_urgent(l, fd, urg, mark)) {
    /* Urgent data that is not ours: the peer application uses it. */
    lk_peer_is_plain(l, fd, R2S_REASON_APP_OOB);
    return RETRY;
  }
  if (urg >= 0 || urg == -EAGAIN) {
    __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
    if (l->rx_state == R2S_RX_PROBE) {
      set_rx(l, R2S_RX_PREMARK);
      /* A receiver need not wait for its next write to offer its ring: the
       * peer may be about to send it a large response (rx_lock held, tx_lock
       * in lock order). Not one that came through exec: the program that
       * reads a request there and execs its worker (git daemon's --serve
       * image, an inetd-style dispatcher) would leave the worker a send
       * direction it cannot continue (README, Limitations); it switches at
       * its first write, or to answer the peer's HANDSHAKE. */
      r2s__lock(&l->tx_lock);
      (void)lk_greet_locked(l, fd);
      if (l->tx_state == R2S_TX_PROBE && !l->inherited && lk_policy_allows_switch(l) && !l->closing &&
          lk_switch_from_rx_locked(l, fd) == 0)
        l->tx_writes = 0, l->tx_probe_at = 1;
      lk_tx_unlock(l, fd);
    }
  }
  if (mark) {
    if (urg == R2S_SWITCH_BYTE) {
      /* What follows the mark (the n peeked bytes) are frames. */
      set_rx(l, R2S_RX_FRAMES);
      return RETRY;
    }
    if (urg == -EAGAIN) return -EAGAIN; /* the mark's byte is still coming */
  } else if (l->rx_state == R2S_RX_PROBE && n > 0 && l->rx_consumed == 0 && urg == -EINVAL) {
    /* Application bytes at position 0 and no urgent byte before them: the
     * peer sent no hello (TCP delivers in order), so it is plain. */
    lk_peer_is_plain(l, fd, R2S_REASON_PEER_PLAIN);
  }
  if (n == 0 && !mark) set_rx_eof(l); /* not with a lone hello still to take (r2s__link_close) */
  if (n <= 0) return n;               /* 0: end of stream; -EAGAIN */
  /* Exactly the bytes counted, into the caller's buffer: no mark can lie
   * inside them (an urgent byte that came since lies behind them). */
  struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)lk_trim_iov(v, v, k, (size_t)n)};
  ssize_t got = r2s__libc.recvmsg(fd, &m, (flags & MSG_PEEK) | MSG_DONTWAIT);
  if (got != n) return got < 0 ? -errno : -EPROTO;
  if (flags & MSG_PEEK) return n;
  __atomic_store_n(&l->rx_consumed, l->rx_consumed + (uint64_t)n, __ATOMIC_RELAXED); /* r2s__link_info */
  return n;
}

/* FRAMES: application bytes are the payloads of DATA frames. */
static ssize_t rx_frames(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  for (;;) {
    if (l->rx_data_left) {
      ssize_t n = lk_krecv_iov(fd, iov, cnt, l->rx_data_left, flags & MSG_PEEK);
      if (n > 0 && !(flags & MSG_PEEK)) l->rx_data_left -= (uint32_t)n;
      if (n == 0) set_rx_eof(l); /* the peer died inside a frame */
      return n;
    }
    r2s_frame_hdr_t h;
    int t = lk_read_frame(l, fd, &h);
    if (t == 0) {
      set_rx_eof(l);
      return 0;
    }
    if (t < 0) return t;
    if (t == R2S_FRAME_DATA) {
      l->rx_data_left = h.len;
      continue;
    }
    int rc = lk_handle_control(l, fd, &h);
    if (rc) return rc;
  }
}

/* After taking bytes out of our ring: a producer waiting for room gets a
 * doorbell. rx_lock held; tx_lock in order. */
static void credit_wakeup(r2s_link_t *l, int fd)
{
  if (!TP(l)->take_peer_tx_sleeper(TPS(l))) return;
  r2s__lock(&l->tx_lock);
  lk_send_doorbell_locked(l, fd);
  lk_tx_unlock(l, fd);
}

/* The peer went back to plain TCP after its ring's first rx_plain_at bytes
 * (PLAIN frame, or FAILOVER): the ring is read up to there, then the
 * kernel takes over, after the resent bytes we had already are dropped
 * (failover.c; fd < 0: not now). */
bool lk_ring_ends_here(r2s_link_t *l, int fd, size_t *want)
{
  if (!l->rx_plain_pending) return false;
  uint64_t consumed = TP(l)->consumed(TPS(l));
  if (consumed >= l->rx_plain_at) {
    if (l->rx_skip && (fd < 0 || !lk_skip_resent(l, fd))) {
      *want = 0;
      return false;
    }
    set_rx(l, R2S_RX_PLAIN);
    lk_settle_plain(l);
    return true;
  }
  if (*want > l->rx_plain_at - consumed) *want = (size_t)(l->rx_plain_at - consumed);
  return false;
}

static ssize_t rx_ring(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  bool peek = (flags & MSG_PEEK) != 0;
  size_t want = r2s__iov_total(iov, cnt);
  for (int pass = 0; pass < 2; pass++) {
    if (lk_ring_ends_here(l, fd, &want)) return RETRY;
    ssize_t n = TP(l)->get(TPS(l), iov, cnt, want, peek);
    if (n > 0) {
      if (!peek) credit_wakeup(l, fd);
      return n;
    }
    if (n < 0) return n;
    if (!LOST(l) && lk_channel_lost(l)) { /* the ring's channel failed: TCP goes on (failover.c) */
      r2s__lock(&l->tx_lock);
      lk_lose_locked(l, fd);
      lk_tx_unlock(l, fd);
      continue;
    }
    if (TP(l)->peer_tx_closed(TPS(l)) || l->rx_eof) {
      /* End of stream only once the ring is empty after seeing it. */
      n = TP(l)->get(TPS(l), iov, cnt, want, peek);
      if (n == 0 && l->rx_err) {
        /* The kernel reports its error once, then the end of the stream;
         * the same error kept for the application (lk_keep_sock_err) is
         * this one. */
        n = l->rx_err;
        l->rx_err = 0;
        int same = (int)n;
        __atomic_compare_exchange_n(&l->sock_err, &same, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      }
      return n;
    }
    /* Only frames read from the socket can change the answer: the ring
     * is looked at again after a pump, not otherwise. */
    if (pass > 0 || !lk_pump_is_due(l)) break;
    int rc = lk_pump_control(l, fd);
    if (rc < 0) return rc;
    if (l->rx_plain_pending && lk_ring_ends_here(l, fd, &want)) return RETRY;
  }
  return -EAGAIN;
}

/* One read of the stream as the receive direction's state has it; -EPROTO
 * and the like lk_fail the link. rx_lock held. */
static ssize_t recv_by_state(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                             r2s_link_moved_t *mv)
{
  ssize_t n;
  int st = l->rx_state;
  switch (st) {
  case R2S_RX_PROBE:
  case R2S_RX_PREMARK:
    n = lk_rx_premark(l, fd, iov, cnt, flags);
    break;
  case R2S_RX_FRAMES:
    n = rx_frames(l, fd, iov, cnt, flags);
    break;
  case R2S_RX_RING:
    n = rx_ring(l, fd, iov, cnt, flags);
    break;
  default: {
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    lk_oobinline_to_kernel(l, fd);
    lk_settle_plain(l);
    n = r2s__libc.recvmsg(fd, &m, flags | MSG_DONTWAIT);
    if (n < 0) n = -errno;
    if (n == 0) set_rx_eof(l);
  }
  }
  if (n == -EPROTO || n == -EPROTONOSUPPORT || n == -ENOMEM)
    lk_fail(l, (int)n,
            l->rx_state == R2S_RX_RING ? "bad frame or ring index from the peer" : "bad frame from the peer");
  /* rx_ring hands out ring bytes only; a state it leaves returns RETRY. */
  if (n > 0 && st == R2S_RX_RING && mv) mv->ring += (size_t)n, mv->ring_path = TP(l)->path;
  return n;
}

/* After `got` bytes, the bytes behind them, as far as the caller has room
 * and the link has them now. TCP hands a read everything queued, up to its
 * size, and programs rely on a short read meaning that nothing more was
 * there: libuv ends a stream at a short read and a POLLHUP without reading
 * again (uv__stream_io), and the peer's FIN comes right behind its last
 * frame or ring byte. The link's states end a read where a DATA frame, the
 * read-ahead buffer or the bytes before the mark end, and where the
 * receive direction moves to the ring: reading goes on across those, and
 * across our peer's switch mark, but not past an urgent byte of the
 * application's, where TCP ends a read too (plain_read: the read before
 * was the kernel's own, which stopped there). Not for a peek (a frame's
 * header cannot be peeked past), and only where bytes are known to wait,
 * so that an error or the end of the stream the kernel reports once is
 * left for the next read. rx_lock held. */
static size_t recv_more(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, size_t got, int flags,
                        r2s_link_moved_t *mv, bool plain_read)
{
  size_t want = r2s__iov_total(iov, cnt), more = 0;
  if (flags & MSG_PEEK) return 0;
  for (int guard = 0; guard < 64 && got + more < want && !FAILED(l); guard++) {
    int st = l->rx_state;
    if (st == R2S_RX_PROBE || st == R2S_RX_PREMARK) {
      /* Across our peer's switch mark, not an urgent byte of the
       * application's: TCP ends a read there. */
      int urg = -EINVAL;
      if (lk_mark_here(fd, &urg) == 1 && urg != R2S_SWITCH_BYTE) break;
    } else if (st == R2S_RX_PLAIN) {
      /* One read of the kernel's, which ends at such a byte itself. */
      if (plain_read) break;
      plain_read = true;
    }
    int queued = 0;
    bool waiting = st == R2S_RX_RING ? TP(l)->avail(TPS(l)) > 0 || l->rx_plain_pending
                                     : r2s__libc.ioctl(fd, FIONREAD, &queued) == 0 && queued > 0;
    if (!waiting) break;
    struct iovec rest[64];
    int k = r2s__iov_advance(rest, 64, iov, cnt, got + more);
    ssize_t n = recv_by_state(l, fd, rest, k, flags, mv);
    if (n == RETRY) continue;
    if (n <= 0) break;
    more += (size_t)n;
  }
  return more;
}

/* The ring case, the common one of a carried connection, first: the
 * receive side reads our ring and the ring alone answers (nothing read
 * ahead, no PLAIN pending, no failure), and it has bytes. Then this is
 * all a read does: what the general path below would do in that case
 * (rx_ring), without its layers, which each cost a ring round trip under
 * emulation (docs/rdma.md, "A short way for ring reads and writes").
 * Returns the bytes read, or 0 for the general path, having changed
 * nothing. rx_lock held. */
static inline ssize_t recv_ring_first(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, size_t want,
                                      int flags, r2s_link_moved_t *mv)
{
  if (l->rx_state != R2S_RX_RING || FAILED(l) || l->rx_plain_pending || r2s__readahead_len(&l->rx_ahead))
    return 0;
  bool peek = (flags & MSG_PEEK) != 0;
  ssize_t n = TP(l)->get(TPS(l), iov, cnt, want, peek);
  if (n <= 0) return 0; /* empty, the end, an error, a bad index: the general path's to handle */
  if (!peek) credit_wakeup(l, fd);
  if (mv) mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
  return n;
}

ssize_t r2s__link_recv(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv)
{
  if (mv) *mv = (r2s_link_moved_t){0};
  /* Each state reads 0 from below as the end of the stream and keeps it
   * (rx_eof): an empty read would end the stream for good. */
  size_t want = r2s__iov_total(iov, cnt);
  if (want == 0) return -EINVAL;
  lk_unquiet(l);
  r2s__lock(&l->rx_lock);
  ssize_t n = recv_ring_first(l, fd, iov, cnt, want, flags, mv);
  if (n > 0) {
    lk_rx_unlock(l, fd);
    return n;
  }
  do {
    if (FAILED(l)) {
      n = FAILED(l);
      break;
    }
    if (r2s__readahead_len(&l->rx_ahead)) {
      /* Bytes a sender read ahead come before all the socket or ring hold. */
      n = (ssize_t)r2s__readahead_take(&l->rx_ahead, iov, cnt, flags & MSG_PEEK);
      if (n && !r2s__readahead_len(&l->rx_ahead) && l->rx_state == R2S_RX_PLAIN) lk_settle_plain(l);
      if (n) {
        n += (ssize_t)recv_more(l, fd, iov, cnt, (size_t)n, flags, mv, false);
        break;
      }
    }
    int st = l->rx_state;
    n = recv_by_state(l, fd, iov, cnt, flags, mv);
    if (n > 0 && (size_t)n < want)
      n += (ssize_t)recv_more(l, fd, iov, cnt, (size_t)n, flags, mv, st == R2S_RX_PLAIN);
  } while (n == RETRY);
  if (n == -EPROTO || n == -EPROTONOSUPPORT || n == -ENOMEM) n = FAILED(l);
  /* After shutdown(SHUT_RD) TCP still hands out what is queued, then the
   * end of the stream; it never waits. So do we: bytes already in the ring
   * (or in TCP) first. A thread that peeked them must be able to read them
   * even if another thread shut the socket down in between. */
  if (n == -EAGAIN && l->rx_shut) n = 0;
  n = lk_give_sock_err(l, n);
  if (n < 0) lk_settle_plain(l);
  lk_rx_unlock(l, fd);
  return n;
}

/* FIONREAD: the bytes a read would find, read-ahead first. */
static ssize_t readable(r2s_link_t *l, int fd)
{
  int q = 0;
  ssize_t n;
  r2s__lock(&l->rx_lock);
  if (l->rx_state == R2S_RX_RING) {
    n = TP(l)->avail(TPS(l));
  } else if (r2s__libc.ioctl(fd, FIONREAD, &q) < 0) {
    n = -errno;
  } else if (l->rx_state == R2S_RX_FRAMES) {
    n = q < (int)l->rx_data_left ? q : (ssize_t)l->rx_data_left;
  } else {
    n = q;
  }
  if (n >= 0) n += (ssize_t)r2s__readahead_len(&l->rx_ahead);
  lk_rx_unlock(l, fd);
  return n;
}

ssize_t r2s__link_ioctl(r2s_link_t *l, int fd, unsigned long req)
{
  if (req == FIONREAD) return readable(l, fd);
  if (req == SIOCATMARK) return lk_atmark(l, fd);
  return -EINVAL;
}

/* The frame reader of the receive direction: frame headers and control
 * frames off the socket, and what each control frame does; and the pumps
 * through which a sender or a waiter reads the frames in front of the
 * application's next byte. rx_lock held, or tried. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#include "sandbox.h"

/* Is a read of the socket worth a system call? While the ring carries the
 * data, TCP brings only doorbells (after we asked for one), the end of the
 * stream or a rare control frame. So we look after arming, after the
 * kernel said the socket is readable, and every 64th time anyway (an
 * application that never waits must still see the end of the stream). */
bool lk_pump_is_due(r2s_link_t *l)
{
  if (__atomic_exchange_n(&l->pump_due, 0, __ATOMIC_ACQ_REL)) return true;
  return (++l->idle_looks & 63) == 0;
}

/* Frames may wait on the socket (the kernel said readable, or a doorbell
 * was asked for): the next look reads them. */
void lk_pump_later(r2s_link_t *l)
{
  __atomic_store_n(&l->pump_due, 1, __ATOMIC_RELEASE);
}

static int handle_handshake(r2s_link_t *l, int fd, const uint8_t *p, uint32_t len)
{
  if (__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) return -EPROTO;
  int rc = r2s__handshake_decode(p, len, &l->peer_hs);
  if (rc == 0) rc = r2s__transports_check(&l->peer_hs); /* a malformed offer is a lie */
  if (rc < 0) return rc;
  __atomic_store_n(&l->have_peer_hs, true, __ATOMIC_RELEASE);
  __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
  /* rx_lock is held: taking tx_lock is in lock order. Our answer waits
   * for our offer if it is not made yet (lk_rx_unlock makes it). */
  r2s__lock(&l->tx_lock);
  if (!(l->tx_state == R2S_TX_PROBE && lk_policy_allows_switch(l) && !l->closing &&
        lk_switch_from_rx_locked(l, fd) == -EINPROGRESS))
    lk_answer_handshake_locked(l, fd);
  lk_tx_unlock(l, fd);
  return 0;
}

/* Reads one frame header (and a control frame's payload) if it is all
 * there. Returns the frame type, 0 at end of stream, -EAGAIN, or -errno. */
int lk_read_frame(r2s_link_t *l, int fd, r2s_frame_hdr_t *h)
{
  while (l->rx_hdr_len < R2S_FRAME_HDR_LEN) {
    ssize_t n = lk_krecv(fd, l->rx_hdr + l->rx_hdr_len, R2S_FRAME_HDR_LEN - l->rx_hdr_len, 0);
    if (n < 0) lk_keep_sock_err(l, n);
    if (n <= 0) return (int)n;
    l->rx_hdr_len += (uint32_t)n;
  }
  int rc = r2s__frame_hdr_parse(l->rx_hdr, l->rx_hdr_len, h);
  if (rc < 0) return rc;
  if (h->type != R2S_FRAME_DATA && h->len) {
    if (!l->rx_ctrl) {
      l->rx_ctrl = malloc(R2S_FRAME_CTRL_MAX);
      if (!l->rx_ctrl) return -ENOMEM;
    }
    while (l->rx_ctrl_len < h->len) {
      ssize_t n = lk_krecv(fd, l->rx_ctrl + l->rx_ctrl_len, h->len - l->rx_ctrl_len, 0);
      if (n < 0) lk_keep_sock_err(l, n);
      if (n <= 0) return n == 0 ? 0 : (int)n;
      l->rx_ctrl_len += (uint32_t)n;
    }
  }
  l->rx_hdr_len = 0;
  l->rx_ctrl_len = 0;
  lk_changed(l); /* a doorbell another wait asked for, perhaps */
  return h->type;
}

/* The peer cannot open our ring by name and asks for it by descriptor
 * (FETCH): it goes to the socket the peer names, and HANDED tells the
 * peer the nonce that proves it came from us, or that it did not come.
 * Once per connection, before the peer's RING. rx_lock held. */
static int handle_fetch(r2s_link_t *l, int fd, const uint8_t *p, uint32_t len)
{
  r2s_fetch_t ask;
  if (l->handed || !TPS(l) || !TP(l)->hand_over || l->rx_state != R2S_RX_FRAMES ||
      r2s__fetch_decode(p, len, &ask) < 0)
    return -EPROTO;
  l->handed = true;
  r2s_handed_t msg;
  memset(&msg, 0, sizeof msg);
  int rc = r2s__sandboxed() ? -EPERM : TP(l)->hand_over(TPS(l), &ask, msg.nonce);
  if (rc < 0) {
    memset(&msg, 0, sizeof msg);
    msg.status = (uint64_t)-rc;
    r2s__debug("cannot hand our ring to the peer by descriptor (%s)", strerror(-rc));
  } else {
    r2s__debug("handed our ring to the peer by descriptor");
  }
  r2s__lock(&l->tx_lock); /* rx_lock held: in lock order */
  l->handed_msg = msg;
  l->handed_owed = true;
  lk_send_handed_locked(l, fd);
  lk_tx_unlock(l, fd);
  return 0;
}

/* The end of our FETCH: the peer's ring came by descriptor (then we move
 * into it as after attach), or it did not (rc < 0: we decline as attach's
 * failure would have had us). rx_lock held. */
static void fetch_done(r2s_link_t *l, int fd, const r2s_handed_t *msg, int rc)
{
  r2s__lock(&l->tx_lock);
  /* Also when it failed: the socket we waited on closes (a sandboxed
   * process only closes it: accepting is not its own call). Not once
   * the reaper reads the closed connection on (reap_read): a ring taken
   * then would carry nothing. */
  bool take = !rc && msg && !r2s__sandboxed() && !__atomic_load_n(&l->reaped, __ATOMIC_ACQUIRE);
  int got = TP(l)->fetched(TPS(l), &l->peer_hs, take ? msg->nonce : NULL);
  if (take)
    rc = got;
  else if (!rc)
    rc = -EPERM;
  if (rc < 0)
    r2s__debug("the peer's ring did not come by descriptor (%s)", strerror(-rc));
  else
    R2S_STAT_INC(rings_by_fd);
  l->fetch_rc = rc;
  __atomic_store_n(&l->fetch, R2S_FETCH_DONE, __ATOMIC_RELEASE);
  lk_try_ring_tx(l, fd);
  lk_tx_unlock(l, fd);
}

static int handle_handed(r2s_link_t *l, int fd, const uint8_t *p, uint32_t len)
{
  r2s_handed_t msg;
  if (__atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE) != R2S_FETCH_ASKED || r2s__handed_decode(p, len, &msg) < 0)
    return -EPROTO;
  /* The peer's errno, for the log: ours to bound. */
  int rc = msg.status == 0 ? 0 : msg.status < 4096 ? -(int)msg.status : -EIO;
  fetch_done(l, fd, &msg, rc);
  return 0;
}

/* Acts on one control frame; RETRY if the receive state changed. */
int lk_handle_control(r2s_link_t *l, int fd, const r2s_frame_hdr_t *h)
{
  uint64_t v;
  switch (h->type) {
  case R2S_FRAME_HANDSHAKE:
    return handle_handshake(l, fd, l->rx_ctrl, h->len);
  case R2S_FRAME_RING:
    l->peer_passed_mark = true;
    if (!TPS(l) || r2s__frame_u64_decode(l->rx_ctrl, h->len, &v) < 0 || v != 0) return -EPROTO;
    TP(l)->seal(TPS(l));
    set_rx(l, R2S_RX_RING);
    lk_mark_upgraded(l);
    r2s__debug("receive direction now in our %s ring", TP(l)->name);
    return RETRY;
  case R2S_FRAME_DECLINE:
    l->peer_passed_mark = true;
    return 0;
  case R2S_FRAME_READY:
    if (h->len || !TPS(l)) return -EPROTO;
    __atomic_store_n(&l->peer_ready, true, __ATOMIC_RELEASE);
    r2s__lock(&l->tx_lock); /* rx_lock held: in lock order */
    lk_try_ring_tx(l, fd);
    lk_tx_unlock(l, fd);
    return 0;
  case R2S_FRAME_PLAIN:
    if (r2s__frame_u64_decode(l->rx_ctrl, h->len, &v) < 0) return -EPROTO;
    if (l->rx_state == R2S_RX_FRAMES) {
      if (v != 0 || l->rx_data_left) return -EPROTO;
      set_rx(l, R2S_RX_PLAIN);
      lk_settle_plain(l);
      /* No HANDED can come behind it: our ring by descriptor is off. */
      if (__atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE) == R2S_FETCH_ASKED)
        fetch_done(l, fd, NULL, -ECONNABORTED);
      return RETRY;
    }
    /* RING: after the ring's first v bytes. The sender published those
     * before it sent PLAIN, so v lies between what we consumed and what the
     * ring holds; anything else would leave us waiting for ring bytes that
     * never come while TCP bytes pile up unread. */
    {
      ssize_t avail = TP(l)->avail(TPS(l));
      uint64_t consumed = TP(l)->consumed(TPS(l));
      if (l->rx_plain_pending || avail < 0 || v < consumed || v - consumed > (uint64_t)avail) return -EPROTO;
    }
    l->rx_plain_pending = true;
    l->rx_plain_at = v;
    return RETRY;
  case R2S_FRAME_DOORBELL:
    __atomic_add_fetch(&l->bells_read, 1, __ATOMIC_RELAXED);
    return 0;
  case R2S_FRAME_FETCH:
    return handle_fetch(l, fd, l->rx_ctrl, h->len);
  case R2S_FRAME_HANDED:
    return handle_handed(l, fd, l->rx_ctrl, h->len);
  case R2S_FRAME_FAILOVER:
    if (r2s__frame_u64_decode(l->rx_ctrl, h->len, &v) < 0) return -EPROTO;
    return lk_peer_lost_locked(l, fd, v);
  case R2S_FRAME_CREDIT:
  case R2S_FRAME_FIN:
    return 0;
  default:
    return -EPROTO;
  }
}

/* Reads the control frames waiting on TCP while the ring carries the data.
 * Returns 0, or -errno for a broken stream. */
int lk_pump_control(r2s_link_t *l, int fd)
{
  /* After PLAIN, TCP carries the application's bytes again (once the ring
   * is read up to the offset): they are not frames. */
  if (l->rx_plain_pending) return 0;
  while (!l->rx_eof) {
    r2s_frame_hdr_t h;
    int t = lk_read_frame(l, fd, &h);
    if (t == -EAGAIN) return 0;
    if (t == 0 || (t < 0 && t != -EPROTO && t != -ENOMEM)) {
      /* The end of the stream, or the kernel's error (a reset): either
       * comes after every ring byte the peer wrote, so readers get those
       * first, then this. */
      set_rx_eof(l);
      l->rx_err = t;
      return 0;
    }
    if (t < 0) return t;
    if (t == R2S_FRAME_DATA) return -EPROTO; /* data after RING */
    int rc = lk_handle_control(l, fd, &h);
    if (rc < 0 && rc != RETRY) return rc;
    if (l->rx_plain_pending) return 0; /* what follows PLAIN is not ours to read */
  }
  return 0;
}

/* A sender whose application never reads (iperf3's data connection) must
 * still see the peer's handshake and RING frames. Called without tx_lock;
 * only tries rx_lock (a reader that holds it is reading those frames). It
 * reads control frames only: application bytes stay for the application.
 * Without a socket (fd < 0), the next look reads them. */
void r2s__link_pump(r2s_link_t *l, int fd)
{
  if (fd < 0)
    lk_pump_later(l);
  else
    lk_pump_from_sender(l, fd, false);
}

/* read_ahead: the caller waits for a frame of the peer (see
 * read_ahead_premark) and may take application bytes in front of it. */
void lk_pump_from_sender(r2s_link_t *l, int fd, bool read_ahead)
{
  if (r2s__trylock(&l->rx_lock) != 0) return;
  size_t had = r2s__readahead_len(&l->rx_ahead);
  lk_read_control_locked(l, fd, read_ahead);
  size_t has = r2s__readahead_len(&l->rx_ahead);
  lk_rx_unlock(l, fd);
  if (has > had)
    r2s__debug("read %zu application bytes ahead of the peer's frames (%zu held)", has - had, has);
}

/* A sender that waits for the peer's frames (its HANDSHAKE, READY, RING or
 * DECLINE) would otherwise wait for the application to read the bytes the
 * peer sent in front of them, which it may do only at the end (iperf2's
 * client and the server's 28-byte reply) or never (an application that
 * sends urgent data before it reads). So it takes those bytes into the
 * read-ahead buffer, as far as it has room, with the same peek-then-mark
 * procedure as a read: in front of the peer's switch mark, the application
 * bytes up to it. In PROBE a peek decides first who the peer is, taking
 * nothing: bytes of a plain peer are never read ahead, and so the
 * direction never turns plain with bytes in the buffer (lk_settle_plain).
 * rx_lock held. */
static void read_ahead_premark(r2s_link_t *l, int fd)
{
  for (int guard = 0; guard < 64; guard++) {
    int st = l->rx_state;
    if (st != R2S_RX_PROBE && st != R2S_RX_PREMARK) return;
    size_t room;
    uint8_t *p = r2s__readahead_room(&l->rx_ahead, &room);
    if (!p) return; /* full: the sender goes on as if it had not looked */
    struct iovec v = {p, room};
    ssize_t n = lk_rx_premark(l, fd, &v, 1, st == R2S_RX_PROBE ? MSG_PEEK : 0);
    if (n == RETRY) continue;
    if (n <= 0) {
      if (n == -EPROTO) lk_fail(l, (int)n, "bad frame from the peer");
      return;
    }
    if (st == R2S_RX_PROBE) {
      if (l->rx_state == R2S_RX_PROBE) return;
      continue; /* it is a shim (PREMARK): now take the bytes */
    }
    r2s__readahead_commit(&l->rx_ahead, (size_t)n);
    lk_changed(l);
  }
}

/* Reads the control frames in front of the application's next byte, as far
 * as they go: the switch mark, frames up to the next DATA header, and after
 * RING those that follow it. With read_ahead, application bytes in front of
 * the first control frame (plain bytes before the switch mark, DATA
 * payloads) go into the read-ahead buffer while it has room; after a
 * control frame it stops at the next DATA header again, so bytes are read
 * ahead only to reach a frame, never to drain the stream. A protocol error
 * fails the link. rx_lock held. */
void lk_read_control_locked(r2s_link_t *l, int fd, bool read_ahead)
{
  if (read_ahead) read_ahead_premark(l, fd);
  int st = l->rx_state;
  if (st == R2S_RX_PROBE || st == R2S_RX_PREMARK) {
    /* At the switch mark with nothing in front of it? */
    int urg = -EINVAL;
    if (lk_mark_here(fd, &urg) == 1 && urg == R2S_SWITCH_BYTE) {
      __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
      set_rx(l, R2S_RX_FRAMES);
      st = R2S_RX_FRAMES;
    }
  }
  if (st == R2S_RX_FRAMES) {
    bool ahead = read_ahead;
    while (!FAILED(l)) {
      if (l->rx_data_left) {
        size_t room;
        uint8_t *p = ahead ? r2s__readahead_room(&l->rx_ahead, &room) : NULL;
        if (!p) break;
        ssize_t n = lk_krecv(fd, p, room < l->rx_data_left ? room : l->rx_data_left, 0);
        if (n <= 0) {
          if (n == 0) set_rx_eof(l); /* the peer died inside a frame */
          break;                     /* -EAGAIN, or the kernel's error, which the reader meets */
        }
        r2s__readahead_commit(&l->rx_ahead, (size_t)n);
        l->rx_data_left -= (uint32_t)n;
        lk_changed(l);
        continue;
      }
      r2s_frame_hdr_t h;
      int t = lk_read_frame(l, fd, &h);
      if (t <= 0) {
        if (t == 0)
          set_rx_eof(l);
        else if (t == -EPROTO || t == -EPROTONOSUPPORT || t == -ENOMEM)
          lk_fail(l, t, "bad frame from the peer");
        /* -EAGAIN, or the kernel's error (a reset), which lk_read_frame
         * kept for the application: it reads what came before it first,
         * as from TCP. */
        break;
      }
      if (t == R2S_FRAME_DATA) {
        l->rx_data_left = h.len;
        if (!ahead) break;
        continue;
      }
      ahead = false;
      int rc = lk_handle_control(l, fd, &h);
      if (rc == RETRY) break;
      if (rc < 0) {
        lk_fail(l, rc, "bad frame from the peer");
        break;
      }
    }
    st = l->rx_state; /* after RING: the frames behind it too */
  }
  if (st == R2S_RX_RING && !FAILED(l)) {
    int rc = lk_pump_control(l, fd);
    if (rc < 0) lk_fail(l, rc, "bad frame from the peer");
  }
}

/* The switch of the send direction (docs/protocol.md): our hello, the
 * policy that allows a switch, the transport chosen and offered in our
 * HANDSHAKE behind the switch mark, and the interlude that tells a peer
 * which switched towards us that our direction stays plain. tx_lock
 * held throughout. */
#include "internal.h"

#include <netinet/tcp.h>

#include <string.h>
#include <arpa/inet.h>

#include "hostid.h"

#include "libc.h"
#include "log.h"

#include "tcphist.h"

/* R2SOCK_TRANSPORT (or a rule's transport=), or the registry's choice by
 * where the peer is (transport.h, rank). Fills what the transport may know
 * of the connection. */
static const r2s_transport_t *choose_transport(r2s_link_t *l, int fd, r2s_tp_conn_t *c)
{
  memset(c, 0, sizeof *c);
  c->fd = fd;
  c->wake = lk_transport_wake;
  c->lost = lk_transport_lost;
  c->arg = l;
  socklen_t ll = sizeof c->local, pl = sizeof c->peer;
  (void)r2s__libc.getsockname(fd, (struct sockaddr *)&c->local, &ll);
  (void)r2s__libc.getpeername(fd, (struct sockaddr *)&c->peer, &pl);
  char name[16];
  bool named = l->policy.transport != R2S_TRANSPORT_AUTO;
  return r2s__transport_choose(named ? r2s__format_transport(&l->policy.transport, name, sizeof name) : NULL, c);
}

/* R2SOCK_UPGRADE (or a rule's upgrade=): at once, or once the connection
 * moved that many bytes over plain TCP (auto: R2S_UPGRADE_AUTO_BYTES), so
 * that short connections never pay for a ring. Both directions count, so the two ends cross the
 * size at about the same point: each answers the other's switch at once. */
bool lk_policy_allows_switch(const r2s_link_t *l)
{
  if (l->policy.upgrade.mode == R2S_UPGRADE_NOW) return true;
  if (l->policy.upgrade.mode == R2S_UPGRADE_NEVER) return false;
  return l->tx_plain_bytes + l->rx_consumed >= l->policy.upgrade.after_bytes;
}

/* Our send direction stays plain (the application uses urgent data, or we
 * had no ring to offer), but the peer switched towards us: it waits to
 * learn that we read past its mark (before it may send urgent data of its
 * own) and for our HANDSHAKE (its bytes go in DATA frames until then).
 * Tell it inside a framed interlude that ends at once: mark, HANDSHAKE
 * without offers, DECLINE, PLAIN; finding no offer, the peer turns its
 * direction plain too. tx_lock held; the peer's shim reads all of it, its
 * application sees none of it. Returns -EAGAIN while the socket has no room
 * for the mark (still owed: no application byte may go before it, or a
 * writer that keeps the socket full would never send it), else 0. */
int lk_send_interlude_locked(r2s_link_t *l, int fd)
{
  static const unsigned char mark = R2S_SWITCH_BYTE;
  if (!l->interlude_owed || l->tx_state != R2S_TX_PLAIN) return 0;
  /* Never after the application's own urgent byte: Linux keeps one urgent
   * pointer, so our mark would replace it and, if the peer's application
   * had not read that far yet, put its urgent byte into its stream as
   * data. The peer then never learns that we passed its mark: its
   * direction stays on TCP frames, and its own urgent data waits (README,
   * Limitations). */
  if (l->app_urgent_sent) {
    l->interlude_owed = false;
    return 0;
  }
  r2s_handshake_t hs;
  memset(&hs, 0, sizeof hs);
  hs.version = hs.min_version = R2S_PROTO_VERSION;
  uint8_t buf[160];
  int len = r2s__handshake_encode(&hs, buf, sizeof buf);
  len += r2s__frame_u64_encode(R2S_FRAME_DECLINE, l->app_oob ? 3 : 2, buf + len, sizeof buf - (size_t)len);
  len += r2s__frame_u64_encode(R2S_FRAME_PLAIN, 0, buf + len, sizeof buf - (size_t)len);
  if ((size_t)len > sizeof l->tx_pending - l->tx_pending_len) return -EAGAIN; /* flushed first */
  ssize_t n = lk_ksend(fd, &mark, 1, MSG_OOB);
  lk_keep_sock_err(l, n);
  if (n == -EAGAIN || n == -ENOBUFS || n == 0) return -EAGAIN;
  if (n < 0) { /* a broken socket: nothing left to tell, the write reports it */
    l->interlude_owed = false;
    return 0;
  }
  lk_queue_ctrl(l, buf, (size_t)len);
  (void)lk_flush_ctrl(l, fd);
  l->interlude_owed = false;
  l->interlude_sent = true;
  r2s__debug("told the peer that our send direction stays on plain TCP (%s)",
             l->app_oob ? "the application uses urgent data" : "no ring to offer");
  return 0;
}

/* An accepting end owes its hello until the peer's has come or its own
 * first application byte leaves, whichever is first: a client checks its
 * connect with poll(POLLOUT|POLLPRI), and curl takes the POLLPRI of a
 * hello that beats that check for a failed connect. A client whose
 * request shows no hello is plain and never gets one. tx_lock held. If
 * the hello cannot go before our first byte, the direction stays plain
 * (the peer, reading bytes at position 0 without a mark, judges us so). */
bool lk_greet_locked(r2s_link_t *l, int fd)
{
  const unsigned char hello = lk_hello_byte(l);
  if (!l->hello_owed) return true;
  if (l->tx_state != R2S_TX_PROBE) return false;
  /* A socket that came through exec may be held by other processes too (a
   * shell script serving a connection runs commands that write on it):
   * only the first to write may begin the protocol. Another image's bytes
   * are the kernel's to count, not ours. */
  if (l->inherited && !r2s__tcp_never_sent(fd)) {
    if (!l->tcp_reason) l->tcp_reason = R2S_REASON_INHERITED;
    set_tx(l, R2S_TX_PLAIN);
    return false;
  }
  ssize_t sent = l->tx_plain_bytes == 0 ? lk_ksend(fd, &hello, 1, MSG_OOB) : 0;
  if (sent == 1) {
    __atomic_store_n(&l->hello_owed, false, __ATOMIC_RELEASE);
    return true;
  }
  lk_keep_sock_err(l, sent);
  /* Still owed, so that no later switch can put a mark behind those bytes. */
  if (!l->tcp_reason) l->tcp_reason = R2S_REASON_NO_HELLO;
  if (l->tx_state == R2S_TX_PROBE) set_tx(l, R2S_TX_PLAIN);
  return false;
}

/* The socket's TCP_NODELAY or TCP_CORK as 0 or 1 (0 if it cannot be read). */
static int kernel_tcp_opt(int fd, int name)
{
  int v = 0;
  socklen_t len = sizeof v;
  return r2s__libc.getsockopt(fd, IPPROTO_TCP, name, &v, &len) == 0 && v != 0;
}

/* Tells the transport the socket's buffer sizes (transport.h,
 * size_buffers): the send buffer only if the application chose it, the
 * kernel's tuning being no bound the ring should copy. */
static void size_buffers(r2s_link_t *l, const r2s_transport_t *tp, r2s_tp_state_t *st, int fd)
{
  if (!tp->size_buffers) return;
  int snd = __atomic_load_n(&l->app_sndbuf, __ATOMIC_RELAXED) ? r2s__sockopt_int(fd, SO_SNDBUF) : 0;
  int rcv = r2s__sockopt_int(fd, SO_RCVBUF);
  tp->size_buffers(st, snd > 0 ? (uint32_t)snd : 0, rcv > 0 ? (uint32_t)rcv : 0);
}

void r2s__link_sized_buffers(r2s_link_t *l, int fd, bool sndbuf)
{
  if (sndbuf) __atomic_store_n(&l->app_sndbuf, true, __ATOMIC_RELAXED);
  /* tps, once set, stays until the link is freed; the sizes are atomic. */
  r2s_tp_state_t *st = __atomic_load_n(&l->tps, __ATOMIC_ACQUIRE);
  if (st) size_buffers(l, __atomic_load_n(&l->tp, __ATOMIC_ACQUIRE), st, fd);
}

/* Makes our offer (transport.h) with no lock of the link held: a ring's
 * making is slow work (shm: shm_open, ftruncate, mmap; RDMA: a device
 * opened, its progress thread started, memory registered) that no reader
 * or sender of this connection must wait behind. Called by the one that
 * found the offer missing (lk_switch_tx returned -EINPROGRESS and set
 * R2S_OFFER_MAKING), which alone fills it; published under tx_lock for
 * lk_switch_tx to take. An offer that nobody takes (the direction settled
 * on TCP in between) is released with the link. */
void lk_make_offer(r2s_link_t *l, int fd)
{
  r2s_handshake_t hs;
  memset(&hs, 0, sizeof hs);
  hs.version = R2S_PROTO_VERSION;
  hs.min_version = R2S_PROTO_VERSION;
  r2s_hostid_t me;
  if (r2s__hostid(&me) == 0) {
    memcpy(hs.boot_id, me.boot_id, 16);
    hs.netns = me.netns;
  }
  r2s_tp_conn_t conn;
  const r2s_transport_t *tp = choose_transport(l, fd, &conn);
  r2s_tp_state_t *st = NULL;
  int rc = tp ? tp->offer(&st, &hs, &conn) : -ENODEV;
  r2s__lock(&l->tx_lock);
  l->offer_tp = tp;
  l->offer_st = rc < 0 ? NULL : st;
  l->offer_rc = rc < 0 ? rc : 0;
  l->offer_hs = hs;
  l->offer_state = R2S_OFFER_MADE;
  lk_tx_unlock(l, fd);
}

/* Sends the switch mark and our HANDSHAKE (with our receive ring); tx_lock
 * held, state PROBE. On failure to offer a ring the direction stays plain.
 * Without an offer made yet it returns -EINPROGRESS, and the caller makes
 * it (lk_make_offer) with every lock of the link dropped and calls again;
 * -EAGAIN while another thread makes it (this write goes as plain TCP,
 * in front of the mark, as any write before the switch). */
int lk_switch_tx(r2s_link_t *l, int fd)
{
  static const unsigned char mark = R2S_SWITCH_BYTE;
  if (!lk_greet_locked(l, fd)) return -EPROTO;
  if (l->offer_state == R2S_OFFER_NONE) {
    l->offer_state = R2S_OFFER_MAKING;
    return -EINPROGRESS;
  }
  if (l->offer_state == R2S_OFFER_MAKING) return -EAGAIN;
  const r2s_transport_t *tp = l->offer_tp;
  r2s_tp_state_t *st = l->offer_st;
  r2s_handshake_t hs = l->offer_hs;
  int rc = l->offer_rc;
  l->offer_state = R2S_OFFER_NONE;
  l->offer_st = NULL;
  if (rc < 0) {
    r2s__debug("no %s ring to offer (%s): sending over TCP", tp ? tp->name : "transport's", strerror(-rc));
    l->tcp_reason = (rc == -ENODEV || rc == -ENOENT) ? R2S_REASON_NO_DEVICE : R2S_REASON_NO_RESOURCES;
    l->no_offer = true;
    set_tx(l, R2S_TX_PLAIN);
    /* A peer that switched already waits for our HANDSHAKE (as in
     * handle_handshake): the interlude tells it. */
    if (__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) l->interlude_owed = true;
    return rc;
  }
  uint8_t frame[256];
  int len = r2s__handshake_encode(&hs, frame, sizeof frame);
  ssize_t n = len < 0 || (size_t)len > sizeof l->tx_pending - l->tx_pending_len ? 0 : lk_ksend(fd, &mark, 1, MSG_OOB);
  if (n != 1) {
    /* The offer stays made: released with the link (a release may wait
     * for a device, never under tx_lock), or taken by a later write. */
    l->offer_state = R2S_OFFER_MADE;
    l->offer_st = st;
    if (len < 0 || (size_t)len > sizeof l->tx_pending - l->tx_pending_len) {
      set_tx(l, R2S_TX_PLAIN);
      return len < 0 ? len : -ENOBUFS;
    }
    lk_keep_sock_err(l, n);
    return n < 0 ? (int)n : -EAGAIN; /* the send buffer is full: try again on a later write */
  }
  /* tp first: a reader without the locks (r2s__link_spin_budget, from
   * another thread's wait) that sees tps calls through tp. */
  __atomic_store_n(&l->tp, tp, __ATOMIC_RELEASE);
  __atomic_store_n(&l->tps, st, __ATOMIC_RELEASE);
  size_buffers(l, tp, st, fd);
  lk_queue_ctrl(l, frame, (size_t)len);
  __atomic_store_n(&l->framed_at, r2s__now_ns(), __ATOMIC_RELAXED);
  set_tx(l, R2S_TX_FRAMES);
  /* From now on this direction of TCP carries the shim's frames, doorbells
   * above all: a doorbell held back by Nagle until the peer's delayed ACK
   * costs 40 ms. The application's own TCP_NODELAY/TCP_CORK (set on this
   * socket or, for an accepted one, on its listener) are kept aside for it
   * (r2s__link_setsockopt) until the direction goes plain again. */
  l->tcp_nodelay = kernel_tcp_opt(fd, TCP_NODELAY);
  l->tcp_cork = kernel_tcp_opt(fd, TCP_CORK);
  int one = 1, zero = 0;
  (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
  (void)lk_flush_ctrl(l, fd);
  r2s__debug("switched the send direction (%s handshake, %d bytes)", tp->name, len);
  lk_connect_tp_locked(l, fd);
  return 0;
}

/* Once we have both our transport state and the peer's handshake: set up
 * our end for the peer's writes (transport.h), then say READY. tx_lock
 * held. */
void lk_connect_tp_locked(r2s_link_t *l, int fd)
{
  if (l->tp_connected || !TPS(l) || !__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE) || l->no_ring)
    return;
  l->tp_connected = true;
  if (!TP(l)->connect) return;
  int rc = TP(l)->connect(TPS(l), &l->peer_hs);
  if (rc < 0) {
    r2s__debug("cannot connect the %s transport to the peer (%s)%s", TP(l)->name, strerror(-rc),
               rc == -ENOPROTOOPT ? "" : ": staying on TCP frames");
    __atomic_store_n(&l->no_ring, true, __ATOMIC_RELEASE);
    l->tcp_reason = rc == -ENOPROTOOPT ? R2S_REASON_UNREACHABLE : R2S_REASON_NO_RESOURCES;
    /* No offer of our transport in the peer's handshake: it cannot take
     * our writes either, so the direction goes plain as below. */
    if (lk_send_decline_locked(l, fd, rc == -ENOPROTOOPT ? 1 : 2) && rc == -ENOPROTOOPT)
      lk_unframe_declined_locked(l, fd, R2S_REASON_UNREACHABLE);
    return;
  }
  l->ready_owed = true;
  lk_send_ready_locked(l, fd);
}

/* Only the send direction can be kept from switching: the peer decides
 * about the other one, and its switch mark must still be found. One that
 * switched towards us waits for our HANDSHAKE, which a direction kept
 * plain never sends: the interlude tells it. tx_lock held. */
void lk_keep_tx_plain_locked(r2s_link_t *l, int fd, r2s_reason_t reason)
{
  int rx = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
  if (l->tx_state == R2S_TX_PROBE) {
    if (!l->tcp_reason) l->tcp_reason = reason;
    set_tx(l, R2S_TX_PLAIN);
    if (rx == R2S_RX_FRAMES || rx == R2S_RX_RING) l->interlude_owed = true;
  }
  if (fd >= 0) (void)lk_send_interlude_locked(l, fd);
  lk_settle_plain(l);
}

void r2s__link_kernel_tx(r2s_link_t *l, int fd)
{
  r2s__lock(&l->tx_lock);
  /* As a direction with no ring to offer: a HANDSHAKE of the peer's that
   * comes later gets the interlude too (lk_answer_handshake_locked). */
  if (l->tx_state == R2S_TX_PROBE) l->no_offer = true;
  lk_keep_tx_plain_locked(l, fd, R2S_REASON_ZEROCOPY);
  lk_tx_unlock(l, fd);
}

/* A reader (rx_lock held, tx_lock taken in order) that meets the peer's
 * hello or HANDSHAKE switches our send direction at once if our offer is
 * made; otherwise it must not make it under rx_lock, so the switch is
 * owed and lk_rx_unlock makes it once rx_lock is free. Returns
 * lk_switch_tx's result, or -EINPROGRESS when owed. */
int lk_switch_from_rx_locked(r2s_link_t *l, int fd)
{
  if (l->offer_state == R2S_OFFER_MADE) return lk_switch_tx(l, fd);
  __atomic_store_n(&l->switch_owed, 1, __ATOMIC_RELEASE);
  return -EINPROGRESS;
}

/* What handle_handshake does once our direction is decided: our end set
 * up for the peer (READY), the interlude if our direction stays plain,
 * and the move into the peer's ring. tx_lock held. */
void lk_answer_handshake_locked(r2s_link_t *l, int fd)
{
  if (!__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) return;
  lk_connect_tp_locked(l, fd);
  /* The peer switched and waits for our HANDSHAKE, which an end that uses
   * urgent data or has no ring to offer never sends: the interlude tells
   * it (without offers, so its direction goes plain too). */
  if (l->tx_state == R2S_TX_PLAIN && (l->app_oob || l->no_offer)) l->interlude_owed = true;
  (void)lk_send_interlude_locked(l, fd);
  lk_try_ring_tx(l, fd);
}

/* The switch a reader owed (lk_switch_from_rx_locked): made with no lock
 * held, then sent under tx_lock if the direction still wants it. */
static void switch_owed(r2s_link_t *l, int fd)
{
  r2s__lock(&l->tx_lock);
  for (int guard = 0; guard < 4; guard++) {
    if (l->tx_state != R2S_TX_PROBE || !lk_policy_allows_switch(l) || l->closing) break;
    int rc = lk_switch_tx(l, fd);
    if (rc == 0) l->tx_writes = 0, l->tx_probe_at = 1;
    if (rc != -EINPROGRESS) break; /* done, failed, or another thread makes the offer and switches */
    lk_tx_unlock(l, fd);
    lk_make_offer(l, fd);
    r2s__lock(&l->tx_lock);
  }
  lk_answer_handshake_locked(l, fd);
  lk_tx_unlock(l, fd);
}

void lk_rx_unlock(r2s_link_t *l, int fd)
{
  r2s__unlock(&l->rx_lock);
  if (fd >= 0 && __atomic_load_n(&l->switch_owed, __ATOMIC_ACQUIRE) &&
      __atomic_exchange_n(&l->switch_owed, 0, __ATOMIC_ACQ_REL))
    switch_owed(l, fd);
}

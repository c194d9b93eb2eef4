/* The upgrade protocol of one connection (docs/protocol.md): hello,
 * detection, the per-direction switch, frames, and the nonblocking stream
 * operations over whichever path each direction is on. */
#include "link.h"

#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "clock.h"
#include "conn.h"
#include "hostid.h"
#include "iovec.h"
#include "libc.h"
#include "log.h"
#include "options.h"
#include "readiness.h"
#include "reaper.h"
#include "rules.h"
#include "sandbox.h"
#include "stats.h"
#include "tcphist.h"

_Static_assert(offsetof(r2s_link_t, passthrough) == 0, "conn.h reads the flag at offset 0");

/* Returned inside this file when a state changed and the caller should
 * look again; never escapes to the callers of r2s__link_*. */
#define RETRY (-100000)

static void pump_from_sender(r2s_link_t *l, int fd, bool read_ahead);
static void read_control_locked(r2s_link_t *l, int fd, bool read_ahead);
static void check_peer_alive(r2s_link_t *l, int fd);

/* The transport is chosen by the send side (switch_tx, under tx_lock) and
 * used by both: published once, read with acquire loads. */
static inline const r2s_transport_t *TP(const r2s_link_t *l)
{
  return __atomic_load_n(&l->tp, __ATOMIC_ACQUIRE);
}
static inline r2s_tp_state_t *TPS(const r2s_link_t *l)
{
  return __atomic_load_n(&l->tps, __ATOMIC_ACQUIRE);
}

/* failed is set by whichever side meets the error, under its own lock, and
 * read by the other side and by poll without either. */
static inline int FAILED(const r2s_link_t *l)
{
  return __atomic_load_n(&l->failed, __ATOMIC_ACQUIRE);
}

/* The end of the stream from TCP; rx_lock held. Stored atomically for
 * look_ring, which reads it without the lock. */
static inline void set_rx_eof(r2s_link_t *l)
{
  __atomic_store_n(&l->rx_eof, true, __ATOMIC_RELEASE);
}

/* ---- kernel calls, nonblocking, returning -errno ---- */

static ssize_t k_send(int fd, const void *buf, size_t len, int flags)
{
  ssize_t n = r2s__libc.send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  return n < 0 ? -errno : n;
}

static ssize_t k_recv(int fd, void *buf, size_t len, int flags)
{
  ssize_t n = r2s__libc.recv(fd, buf, len, flags | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

/* The caller's iovec, cut to at most max bytes (and 64 entries: a short
 * read or write is always allowed). */
static int trim_iov(struct iovec *out, const struct iovec *iov, int cnt, size_t max)
{
  int k = 0;
  for (int i = 0; i < cnt && k < 64 && max > 0; i++) {
    if (iov[i].iov_len == 0) continue;
    out[k] = iov[i];
    if (out[k].iov_len > max) out[k].iov_len = max;
    max -= out[k].iov_len;
    k++;
  }
  return k;
}

static ssize_t k_recv_iov(int fd, const struct iovec *iov, int cnt, size_t max, int flags)
{
  struct iovec v[64];
  struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)trim_iov(v, iov, cnt, max)};
  ssize_t n = r2s__libc.recvmsg(fd, &m, flags | MSG_DONTWAIT);
  return n < 0 ? -errno : n;
}

static int at_mark(int fd)
{
  int v = 0;
  return r2s__libc.ioctl(fd, SIOCATMARK, &v) < 0 ? -errno : v;
}

/* The urgent byte the peer sent last, without consuming it (so an
 * application that uses urgent data itself still finds it): its value,
 * -EAGAIN if the pointer arrived but not the byte, -EINVAL if none. */
static int urgent_peek(int fd)
{
  unsigned char c;
  ssize_t n = r2s__libc.recv(fd, &c, 1, MSG_OOB | MSG_PEEK | MSG_DONTWAIT);
  return n == 1 ? c : -errno;
}

/* The urgent byte at the reader's position once the connection was reset:
 * the kernel no longer answers recv(MSG_OOB) then (ENOTCONN), but the byte
 * is still in the stream, where SO_OOBINLINE shows it. Only for a reader at
 * the mark (SIOCATMARK 1), with rx_lock held and the kernel's SO_OOBINLINE
 * the shim's (off) in PROBE and PREMARK. Its value, or -errno. */
static int urgent_after_reset(int fd)
{
  int on = 1, off = 0;
  unsigned char c;
  if (r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on) < 0) return -errno;
  ssize_t n = r2s__libc.recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  int err = n < 0 ? -errno : 0;
  (void)r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &off, sizeof off);
  return n == 1 ? c : n == 0 ? -ENOTCONN : err;
}

/* Whether the reader is at an urgent mark (1, 0 or -errno) and, when it
 * is, the urgent byte of that mark in *urg. Two calls cannot ask the
 * kernel both at once, and a newer urgent byte replaces the older one
 * between them: a server's switch mark sent behind its greeting replaces
 * its hello at position 0 and moves the mark past the greeting. A value
 * read after SIOCATMARK said 1 may so belong to a mark we are not at, and
 * the greeting would be parsed as frames. So the value is read after a
 * first SIOCATMARK and the position asked again after the value: a mark
 * that arrives later lies farther on, never under the reader, so a second
 * 1 means the value read before it is the one at the reader. */
static int mark_here(int fd, int *urg)
{
  int m = at_mark(fd);
  if (m != 1) return m;
  *urg = urgent_peek(fd);
  return at_mark(fd);
}

/* When the send side looks for the peer's hello (or handshake) next: at
 * every write at first, then at doubling intervals capped at 64 writes, so
 * a plain peer costs one extra system call per 64 writes at most, and bytes
 * sent before a shim peer is noticed stay few. */
#define PROBE_BYTES (256u << 10)

static uint64_t next_probe(uint64_t writes)
{
  if (writes < 16) return writes + 1;
  uint64_t step = writes < 64 ? writes : 64;
  return writes + step;
}

/* The kernel reports a socket's error (a reset, a time-out) to the first
 * call that meets it, and then no more. When that call was one of the
 * shim's own (a hello, a frame), the error is kept for the application's
 * next call (r2s__link_recv, r2s__link_send), which plain TCP would have
 * given it to. */
static void keep_sock_err(r2s_link_t *l, ssize_t n)
{
  int e = (int)-n;
  if (e == ECONNRESET || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == ECONNREFUSED ||
      e == ENETDOWN || e == EHOSTDOWN) {
    int none = 0;
    __atomic_compare_exchange_n(&l->sock_err, &none, -e, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
}

/* What the application's call that got n returns: n, or, when it moved no
 * byte, the error kept for it (the kernel reports the error in front of
 * the end of the stream, of EAGAIN, and of the errors that only follow
 * from it, such as EPIPE after a reset). */
static ssize_t give_sock_err(r2s_link_t *l, ssize_t n)
{
  if (n > 0 || !__atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE)) return n;
  int e = __atomic_exchange_n(&l->sock_err, 0, __ATOMIC_ACQ_REL);
  return e ? e : n;
}

/* ---- state ---- */

static void set_rx(r2s_link_t *l, int s)
{
  __atomic_store_n(&l->rx_state, s, __ATOMIC_RELEASE);
}

static void set_tx(r2s_link_t *l, int s)
{
  __atomic_store_n(&l->tx_state, s, __ATOMIC_RELEASE);
}

/* Both directions settled on plain TCP: from now on the wrappers skip the
 * link entirely. Not while bytes read ahead wait for the application: the
 * kernel does not have them (r2s__link_recv settles once they are read).
 * None are added once the receive direction is plain. */
static void settle_plain(r2s_link_t *l)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN &&
      __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_PLAIN && !l->interlude_owed &&
      r2s__readahead_len(&l->rx_ahead) == 0 && !__atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE) &&
      !__atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) &&
      __atomic_exchange_n(&l->passthrough, 1, __ATOMIC_ACQ_REL) == 0)
    __atomic_fetch_sub(&r2s__links_active, 1, __ATOMIC_RELAXED);
}

/* A protocol error on the receive side (rx_lock held: the frame header in
 * hand is shown). */
static void fail(r2s_link_t *l, int err, const char *why)
{
  if (__atomic_exchange_n(&l->failed, -ECONNRESET, __ATOMIC_ACQ_REL) != 0) return;
  R2S_STAT_INC(reset_protocol);
  r2s__warn(
      "connection reset: %s (%s; rx state %d, tx state %d, header %02x %02x %02x %02x %02x %02x %02x %02x, "
      "%u header bytes)",
      why, strerror(-err), l->rx_state, __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE), l->rx_hdr[0],
      l->rx_hdr[1], l->rx_hdr[2], l->rx_hdr[3], l->rx_hdr[4], l->rx_hdr[5], l->rx_hdr[6], l->rx_hdr[7],
      l->rx_hdr_len);
}

/* The same from the send side (tx_lock held), which must not look at the
 * receive side's frame state. */
static void fail_tx(r2s_link_t *l, int err, const char *why)
{
  if (__atomic_exchange_n(&l->failed, -ECONNRESET, __ATOMIC_ACQ_REL) != 0) return;
  R2S_STAT_INC(reset_protocol);
  r2s__warn("connection reset: %s (%s; tx state %d)", why, strerror(-err), l->tx_state);
}

/* The application's SO_OOBINLINE, kept aside while the receive direction
 * may still meet the peer's hello or switch mark (read inline, the shim's
 * byte would be data), goes to the kernel once the direction is plain TCP:
 * every urgent byte in front of the reader from then on is the peer
 * application's. rx_lock held (or the link not yet shared). */
static void oobinline_to_kernel(r2s_link_t *l, int fd)
{
  if (!__atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) || l->rx_state != R2S_RX_PLAIN) return;
  int on = 1;
  if (r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on) == 0)
    __atomic_store_n(&l->app_oobinline, false, __ATOMIC_RELEASE);
}

/* The peer turned out to be a plain TCP stack: the receive direction was
 * decided by the caller; the send direction follows if it has not switched. */
static void peer_is_plain(r2s_link_t *l, int fd, int reason)
{
  r2s__debug("receive direction is plain TCP (%s)",
             reason == R2S_REASON_APP_OOB ? "the peer's application sent urgent data" : "the peer sent no hello");
  if (!l->tcp_reason) l->tcp_reason = reason;
  set_rx(l, R2S_RX_PLAIN);
  oobinline_to_kernel(l, fd);
  if (pthread_mutex_trylock(&l->tx_lock) == 0) {
    if (l->tx_state == R2S_TX_PROBE) set_tx(l, R2S_TX_PLAIN);
    pthread_mutex_unlock(&l->tx_lock);
  }
  settle_plain(l);
}

/* Our hello: a sized one when the policy waits for bytes (at least the
 * largest power of two in after_bytes), so that a peer that closes first
 * knows whether a switch mark of ours could still come (r2s__link_close). */
static unsigned char hello_byte(const r2s_link_t *l)
{
  uint64_t after = l->policy.upgrade.mode == R2S_UPGRADE_NOW ? 0 : l->policy.upgrade.after_bytes;
  if (after == 0) return R2S_HELLO_BYTE;
  return (unsigned char)(R2S_HELLO_SIZED | (63 - __builtin_clzll(after)));
}

/* Whether the peer's urgent byte urg (>= 0) is the shim's: a switch mark,
 * or a hello where hellos are sent, at the very start of the stream (the
 * reader then stands at the mark: mark 1, or -1 to ask). An application
 * may send an urgent byte of the same value; anywhere else it is its own.
 * At the start it could be either, if the peer's shim had not greeted
 * first: an accepting end does before its application's first urgent byte
 * (r2s__link_send_oob), so the application's byte comes second and the
 * kernel steps over the hello, which r2s__tcp_mark_at_start sees. */
static bool shim_urgent_here(int fd, int urg, int mark)
{
  if (!r2s__is_shim_urgent(urg)) return false;
  /* A switch mark may stand anywhere; an application's urgent byte of
   * its value is taken for one (README, limitations). */
  if (urg == R2S_SWITCH_BYTE) return true;
  /* Where the mark stands is asked of the kernel, not of our count, which
   * a link inherited across exec does not have; and after urg was read
   * (mark 1 says so): a position asked before may be that of no urgent
   * byte at all. */
  int m = mark == 1 ? 1 : at_mark(fd);
  /* The kernel cannot say (a reset, an old kernel): taken for the hello,
   * which is by far the likelier. */
  if (m < 0 || (m == 1 && r2s__tcp_mark_at_start(fd) != 0)) return true;
  /* Past the start or ahead of the reader, unless a newer urgent byte
   * (the peer's switch mark) came since urg was read and moved the mark:
   * the reader then looks again, at the new one. */
  return urgent_peek(fd) != urg || at_mark(fd) != m;
}

/* The peer's urgent byte urg (>= 0) was seen (mark as for
 * shim_urgent_here): a hello is kept for r2s__link_close. Returns whether
 * the byte is the shim's. */
static bool note_urgent(r2s_link_t *l, int fd, int urg, int mark)
{
  bool ours = shim_urgent_here(fd, urg, mark);
  if (ours && r2s__is_hello(urg)) __atomic_store_n(&l->peer_hello, urg, __ATOMIC_RELAXED);
  return ours;
}

/* A link in the given states, counted as active; NULL without memory. */
static r2s_link_t *link_new(int rx_state, int tx_state)
{
  r2s_link_t *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  pthread_mutex_init(&l->rx_lock, NULL);
  pthread_mutex_init(&l->tx_lock, NULL);
  l->rx_state = rx_state;
  l->tx_state = tx_state;
  l->refs = 1;
  l->tx_probe_at = 1;
  l->pump_due = 1;
  l->policy = r2s__policy_default();
  __atomic_fetch_add(&r2s__links_active, 1, __ATOMIC_RELAXED);
  return l;
}

r2s_link_t *r2s__link_start(int fd, bool accepted, const r2s_policy_t *policy)
{
  if (policy->upgrade.mode == R2S_UPGRADE_NEVER) return NULL;
  /* The link exists before the hello leaves: a peer that hears it may
   * switch, and then someone must be watching for its mark. */
  r2s_link_t *l = link_new(R2S_RX_PROBE, R2S_TX_PROBE);
  if (!l) return NULL;
  l->policy = *policy;
  const unsigned char hello = hello_byte(l);
  l->peer_shim = r2s__opt.peer_shim;
  if (accepted && !l->peer_shim) {
    l->hello_owed = true;
    return l;
  }
  if (k_send(fd, &hello, 1, MSG_OOB) != 1) {
    r2s__link_free(l);
    return NULL;
  }
  return l;
}

r2s_link_t *r2s__link_start_inline(int fd)
{
  /* An application that wants urgent data inline: send no hello, keep the
   * kernel's SO_OOBINLINE off while the peer's hello may still come (so it
   * is not read as data), and give the application its setting back as
   * soon as the receive direction settles on plain TCP. */
  int off = 0;
  if (r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &off, sizeof off) < 0) return NULL;
  r2s_link_t *l = link_new(R2S_RX_PROBE, R2S_TX_PLAIN);
  if (!l) return NULL;
  l->app_oob = true;
  __atomic_store_n(&l->app_oobinline, true, __ATOMIC_RELEASE);
  l->tcp_reason = R2S_REASON_APP_OOB;
  return l;
}

r2s_link_t *r2s__link_adopt(void)
{
  /* Nothing could have upgraded it: neither the options nor a rule. */
  if (r2s__opt.upgrade.mode == R2S_UPGRADE_NEVER && !r2s__rules.may_upgrade) return NULL;
  /* The process that made the connection may have read the hello and may
   * have told the peer to switch: watch for the mark for good, and never
   * switch ourselves (its handshake state went with the old image). */
  r2s_link_t *l = link_new(R2S_RX_PREMARK, R2S_TX_PLAIN);
  if (!l) return NULL;
  l->rx_consumed = 1;
  l->tcp_reason = R2S_REASON_INHERITED;
  return l;
}

bool r2s__link_sandbox(r2s_link_t *l)
{
  /* Another thread inside the link: leave it (and the process to the
   * filter) rather than wait under the caller's locks. */
  if (pthread_mutex_trylock(&l->rx_lock) != 0) return false;
  if (pthread_mutex_trylock(&l->tx_lock) != 0) {
    pthread_mutex_unlock(&l->rx_lock);
    return false;
  }
  int rx = l->rx_state, tx = l->tx_state;
  /* Nothing of the protocol is under way that only the shim's own calls
   * (recvmsg, SIOCATMARK, MSG_OOB sends) could finish: no frame or ring in
   * either direction, no control bytes owed, no bytes read ahead. */
  bool quiet = (rx == R2S_RX_PROBE || rx == R2S_RX_PREMARK || rx == R2S_RX_PLAIN) && !l->rx_plain_pending &&
               (tx == R2S_TX_PROBE || tx == R2S_TX_PLAIN) && !l->tp && l->tx_pending_len == 0 &&
               r2s__readahead_len(&l->rx_ahead) == 0 && !l->interlude_owed &&
               !__atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) && !FAILED(l);
  if (quiet) {
    if (!l->tcp_reason) l->tcp_reason = R2S_REASON_SANDBOXED;
    set_rx(l, R2S_RX_PLAIN);
    set_tx(l, R2S_TX_PLAIN);
    settle_plain(l);
  }
  pthread_mutex_unlock(&l->tx_lock);
  pthread_mutex_unlock(&l->rx_lock);
  return quiet;
}

void r2s__link_free(r2s_link_t *l)
{
  if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (!__atomic_load_n(&l->passthrough, __ATOMIC_ACQUIRE))
    __atomic_fetch_sub(&r2s__links_active, 1, __ATOMIC_RELAXED);
  if (TPS(l)) TP(l)->release(TPS(l));
  free(l->rx_ctrl);
  r2s__readahead_free(&l->rx_ahead);
  pthread_mutex_destroy(&l->rx_lock);
  pthread_mutex_destroy(&l->tx_lock);
  free(l);
}

int r2s__link_rx_path(const r2s_link_t *l)
{
  /* Bytes read ahead came over TCP, and the next read takes them. */
  if (r2s__readahead_len(&l->rx_ahead)) return R2S_PATH_TCP;
  return __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING ? TP(l)->path : R2S_PATH_TCP;
}

int r2s__link_tx_path(const r2s_link_t *l)
{
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING ? TP(l)->path : R2S_PATH_TCP;
}

int r2s__link_reason(const r2s_link_t *l)
{
  if (__atomic_load_n(&l->upgraded, __ATOMIC_ACQUIRE)) return R2S_REASON_NONE;
  if (FAILED(l)) return R2S_REASON_FAILED;
  if (l->tcp_reason) return l->tcp_reason;
  if (!__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE)) return R2S_REASON_NO_PEER_YET;
  /* Read without the locks: a close may classify while another thread
   * still sends (the counters are stored atomically for this). */
  uint64_t moved = __atomic_load_n(&l->tx_plain_bytes, __ATOMIC_RELAXED) +
                   __atomic_load_n(&l->rx_consumed, __ATOMIC_RELAXED);
  bool sized = l->policy.upgrade.mode == R2S_UPGRADE_AUTO || l->policy.upgrade.mode == R2S_UPGRADE_AFTER;
  if (sized && __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_PROBE &&
      moved < l->policy.upgrade.after_bytes)
    return R2S_REASON_SHORT;
  return R2S_REASON_UNFINISHED;
}

/* The first direction of the connection entered a ring. */
static void mark_upgraded(r2s_link_t *l)
{
  /* Cleared when the reaper takes the link over (r2s__link_close): its
   * connection may be gone by then. */
  void (*cb)(void *, int) = __atomic_load_n(&l->on_upgrade, __ATOMIC_ACQUIRE);
  if (__atomic_exchange_n(&l->upgraded, 1, __ATOMIC_ACQ_REL) == 0 && cb) cb(l->on_upgrade_arg, TP(l)->path);
}

/* The send side waits for a frame from the peer (its HANDSHAKE, then its
 * READY) that an application which never reads would never make us read:
 * the sender looks for it itself. Atomic loads only: a reader's wait asks
 * too (r2s__link_may_read_ahead), without tx_lock. */
static bool awaits_peer(const r2s_link_t *l)
{
  if (!__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) return true;
  if (__atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE) == R2S_FETCH_ASKED) return true; /* its HANDED */
  return !__atomic_load_n(&l->no_ring, __ATOMIC_ACQUIRE) && TP(l) && TP(l)->needs_ready &&
         !__atomic_load_n(&l->peer_ready, __ATOMIC_ACQUIRE);
}

#define READ_AHEAD_WINDOW_NS 1000000000ll

bool r2s__link_may_read_ahead(r2s_link_t *l)
{
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_FRAMES &&
         r2s__now_ns() - __atomic_load_n(&l->framed_at, __ATOMIC_RELAXED) <= READ_AHEAD_WINDOW_NS && awaits_peer(l);
}

/* The RING frame says where the peer's reading continues: until all of it
 * is in the kernel, no byte may go into the ring. Otherwise a FIN (our
 * shutdown or close, with the socket still full of DATA frames the peer had
 * not read) could cut the frame off behind them, and the peer, never told
 * to read its ring, would see the end of the stream with our ring bytes
 * unread: a premature EOF that the 1000-connection test hit under load. */
bool r2s__link_tx_in_ring(r2s_link_t *l)
{
  /* The same holds for a PLAIN frame (r2s__link_send_oob): the ring ends
   * where it says, so nothing more may go in while it waits; the kernel's
   * POLLOUT says when it can leave. */
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING &&
         !__atomic_load_n(&l->ring_unsent, __ATOMIC_ACQUIRE) &&
         !__atomic_load_n(&l->plain_unsent, __ATOMIC_ACQUIRE);
}

/* ---- send side: control bytes ---- */

/* Queues control bytes behind anything still pending; tx_lock held. None
 * behind our PLAIN frame: the peer reads what follows it as application
 * bytes. */
static int queue_ctrl(r2s_link_t *l, const void *p, size_t len)
{
  if (l->plain_unsent) return -EPIPE;
  if (len > sizeof l->tx_pending - l->tx_pending_len) return -ENOBUFS;
  memcpy(l->tx_pending + l->tx_pending_len, p, len);
  l->tx_pending_len += (uint32_t)len;
  return 0;
}

/* Our PLAIN frame is all in the kernel: the send direction is plain TCP
 * from here on (r2s__link_send_oob, a ring that could not grow, a peer out
 * of reach). The state first, then the flag: a lockless
 * r2s__link_tx_in_ring never sees the ring open in between. The kernel gets
 * the application's TCP_NODELAY and TCP_CORK back (switch_tx set its own).
 * tx_lock held. */
static void plain_sent_locked(r2s_link_t *l, int fd)
{
  l->tcp_reason = l->plain_reason;
  set_tx(l, R2S_TX_PLAIN);
  if (!l->tcp_nodelay) (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &l->tcp_nodelay, sizeof(int));
  if (l->tcp_cork) (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_CORK, &l->tcp_cork, sizeof(int));
  __atomic_store_n(&l->plain_unsent, false, __ATOMIC_RELEASE);
  settle_plain(l);
  if (l->plain_reason == R2S_REASON_APP_OOB)
    R2S_STAT_INC(oob_fallbacks);
  else if (l->plain_reason == R2S_REASON_NO_RESOURCES)
    R2S_STAT_INC(room_fallbacks);
}

/* Queues the PLAIN frame that ends our send direction's ring (or frames)
 * after what we put there; flush_ctrl turns the direction plain once the
 * frame has left, and no byte goes behind it before. tx_lock held. */
static int queue_plain_locked(r2s_link_t *l, int reason)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  uint64_t at = l->tx_state == R2S_TX_RING ? TP(l)->produced(TPS(l)) : 0;
  r2s__frame_u64_encode(R2S_FRAME_PLAIN, at, f, sizeof f);
  int rc = queue_ctrl(l, f, sizeof f);
  if (rc) return rc;
  l->plain_reason = reason;
  __atomic_store_n(&l->plain_unsent, true, __ATOMIC_RELEASE);
  return 0;
}

/* Pushes pending control bytes into the socket; 0 when all went, -EAGAIN
 * when some are left. A PLAIN frame among them turns the direction plain
 * once it has left, whoever pushed it. tx_lock held. */
static int flush_ctrl(r2s_link_t *l, int fd)
{
  while (l->tx_pending_len) {
    ssize_t n = k_send(fd, l->tx_pending, l->tx_pending_len, 0);
    if (n < 0) keep_sock_err(l, n);
    if (n < 0) return (int)n;
    memmove(l->tx_pending, l->tx_pending + n, l->tx_pending_len - (size_t)n);
    l->tx_pending_len -= (uint32_t)n;
  }
  if (__atomic_load_n(&l->ring_unsent, __ATOMIC_RELAXED)) __atomic_store_n(&l->ring_unsent, false, __ATOMIC_RELEASE);
  if (l->plain_unsent) plain_sent_locked(l, fd);
  return 0;
}

/* Whether our send direction carries the shim's frames: only then may a
 * DOORBELL or READY go out. Before our switch, and after our PLAIN (the
 * application sent urgent data), it carries the application's bytes, and
 * the peer would read a frame as data. tx_lock held. */
static bool carries_frames(const r2s_link_t *l)
{
  return l->tx_state == R2S_TX_FRAMES || l->tx_state == R2S_TX_RING;
}

static void send_doorbell_locked(r2s_link_t *l, int fd)
{
  uint8_t h[R2S_FRAME_HDR_LEN];
  /* After our PLAIN, the peer's sleeping producer finds the room when its
   * sleep slice ends. */
  if (!carries_frames(l)) return;
  r2s__frame_hdr_put(h, sizeof h, R2S_FRAME_DOORBELL, 0);
  /* A doorbell behind a DATA frame in flight would land inside it; the
   * ring is not in use then anyway. */
  if (l->tx_data_left == 0 && queue_ctrl(l, h, sizeof h) == 0) {
    R2S_STAT_INC(doorbells);
    (void)flush_ctrl(l, fd);
  }
}

/* Tells the peer we read its handshake but cannot use its ring; false if
 * the frame could not be queued. */
static bool send_decline_locked(r2s_link_t *l, int fd, uint64_t why)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode(R2S_FRAME_DECLINE, why, f, sizeof f);
  if (l->tx_data_left || queue_ctrl(l, f, sizeof f) < 0) return false;
  (void)flush_ctrl(l, fd);
  return true;
}

/* We declined the peer's ring for good, and the peer cannot use ours
 * either: the same test fails on its side (another host or network
 * namespace; for shared memory, a segment of another user), or it offered
 * none (a HANDSHAKE without offers: it has no device or no room). DATA frames
 * would then carry the direction for the rest of its life at a cost to
 * both ends (a cross-user redis-benchmark ran at 0.70x the rate of plain
 * TCP), so a PLAIN frame right behind the DECLINE makes it plain TCP
 * again, as after urgent data. Not after a shortage, which may hit one end
 * only: the peer may still move into our ring, whose doorbells need a
 * framed direction. Only behind our DECLINE, which tells the peer that we
 * read past its mark. tx_lock held, no DATA frame half sent (try_ring_tx). */
static void unframe_declined_locked(r2s_link_t *l, int fd, r2s_reason_t why)
{
  if (l->tx_state != R2S_TX_FRAMES || l->plain_unsent || queue_plain_locked(l, why) < 0) return;
  r2s__debug("the peer's ring is out of reach (%s): the send direction goes back to plain TCP",
             why == R2S_REASON_OTHER_USER ? "another user" : "another host or namespace, or no ring offered");
  (void)flush_ctrl(l, fd);
}

/* Tells the peer our end of the transport takes its writes (RDMA: our
 * queue pair is ready to receive), once no DATA frame is half sent. */
static void send_ready_locked(r2s_link_t *l, int fd)
{
  uint8_t h[R2S_FRAME_HDR_LEN];
  if (!l->ready_owed || l->tx_data_left) return;
  /* After our PLAIN (urgent data sent while a DATA frame held READY back)
   * the peer writes nothing into our ring without READY: it stays on
   * frames. */
  if (!carries_frames(l)) return;
  r2s__frame_hdr_put(h, sizeof h, R2S_FRAME_READY, 0);
  if (queue_ctrl(l, h, sizeof h) == 0) {
    l->ready_owed = false;
    (void)flush_ctrl(l, fd);
  }
}

/* Answers the peer's FETCH (handle_fetch), once no DATA frame is half
 * sent. After our PLAIN nothing can tell the peer any more: its direction
 * stays on DATA frames. */
static void send_handed_locked(r2s_link_t *l, int fd)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8 + R2S_NONCE_LEN];
  if (!l->handed_owed || l->tx_data_left) return;
  if (!carries_frames(l)) {
    l->handed_owed = false;
    return;
  }
  int len = r2s__handed_encode(&l->handed_msg, f, sizeof f);
  if (len > 0 && queue_ctrl(l, f, (size_t)len) == 0) {
    l->handed_owed = false;
    (void)flush_ctrl(l, fd);
  }
}

/* Once we have both our transport state and the peer's handshake: set up
 * our end for the peer's writes (transport.h), then say READY. tx_lock
 * held. */
static void connect_tp_locked(r2s_link_t *l, int fd)
{
  if (l->tp_connected || !TPS(l) || !__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE) || l->no_ring) return;
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
    if (send_decline_locked(l, fd, rc == -ENOPROTOOPT ? 1 : 2) && rc == -ENOPROTOOPT)
      unframe_declined_locked(l, fd, R2S_REASON_UNREACHABLE);
    return;
  }
  l->ready_owed = true;
  send_ready_locked(l, fd);
}

/* The progress thread of a transport asks for a DOORBELL (transport.h). */
static void transport_wake(void *arg, int fd)
{
  r2s_link_t *l = arg;
  pthread_mutex_lock(&l->tx_lock);
  send_doorbell_locked(l, fd);
  pthread_mutex_unlock(&l->tx_lock);
}

/* ---- the switch of the send direction ---- */

/* Is the peer's address one of this host's (in our network namespace)?
 * Loopback is; otherwise the kernel tells: only a local address can be
 * bound. */
static bool peer_is_local(const struct sockaddr_storage *peer)
{
  if (peer->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) return true;
  } else if (peer->ss_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)peer)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127)) return true;
  } else {
    return false;
  }
  int s = r2s__libc.socket(peer->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return true; /* cannot tell: shared memory at least stays on this host */
  struct sockaddr_storage a = *peer;
  if (a.ss_family == AF_INET)
    ((struct sockaddr_in *)&a)->sin_port = 0;
  else
    ((struct sockaddr_in6 *)&a)->sin6_port = 0;
  socklen_t len = a.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  bool local = r2s__libc.bind(s, (struct sockaddr *)&a, len) == 0;
  r2s__libc.close(s);
  return local;
}

/* R2SOCK_TRANSPORT (or a rule's transport=), or by where the peer is:
 * shared memory on this host, RDMA to another. Fills what the transport
 * may know of the connection. */
static const r2s_transport_t *choose_transport(r2s_link_t *l, int fd, r2s_tp_conn_t *c)
{
  memset(c, 0, sizeof *c);
  c->fd = fd;
  c->wake = transport_wake;
  c->arg = l;
  socklen_t ll = sizeof c->local, pl = sizeof c->peer;
  (void)r2s__libc.getsockname(fd, (struct sockaddr *)&c->local, &ll);
  (void)r2s__libc.getpeername(fd, (struct sockaddr *)&c->peer, &pl);
  switch (l->policy.transport) {
  case R2S_TRANSPORT_SHM:
    return &r2s__transport_shm;
  case R2S_TRANSPORT_RDMA:
    return &r2s__transport_rdma;
  default:
    return peer_is_local(&c->peer) ? &r2s__transport_shm : &r2s__transport_rdma;
  }
}

/* R2SOCK_UPGRADE (or a rule's upgrade=): at once, or once the connection
 * moved that many bytes over plain TCP (auto: R2S_UPGRADE_AUTO_BYTES), so
 * that short connections never pay for a ring. Both directions count, so the two ends cross the
 * size at about the same point: each answers the other's switch at once. */
static bool policy_allows_switch(const r2s_link_t *l)
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
static int send_interlude_locked(r2s_link_t *l, int fd)
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
  ssize_t n = k_send(fd, &mark, 1, MSG_OOB);
  keep_sock_err(l, n);
  if (n == -EAGAIN || n == -ENOBUFS || n == 0) return -EAGAIN;
  if (n < 0) { /* a broken socket: nothing left to tell, the write reports it */
    l->interlude_owed = false;
    return 0;
  }
  queue_ctrl(l, buf, (size_t)len);
  (void)flush_ctrl(l, fd);
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
static bool greet_locked(r2s_link_t *l, int fd)
{
  const unsigned char hello = hello_byte(l);
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
  ssize_t sent = l->tx_plain_bytes == 0 ? k_send(fd, &hello, 1, MSG_OOB) : 0;
  if (sent == 1) {
    __atomic_store_n(&l->hello_owed, false, __ATOMIC_RELEASE);
    return true;
  }
  keep_sock_err(l, sent);
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

/* Sends the switch mark and our HANDSHAKE (with our receive ring); tx_lock
 * held, state PROBE. On failure to offer a ring the direction stays plain. */
static int switch_tx(r2s_link_t *l, int fd)
{
  static const unsigned char mark = R2S_SWITCH_BYTE;
  if (!greet_locked(l, fd)) return -EPROTO;
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
  int rc = tp->offer(&st, &hs, &conn);
  if (rc < 0) {
    r2s__debug("no %s ring to offer (%s): sending over TCP", tp->name, strerror(-rc));
    l->tcp_reason = (rc == -ENODEV || rc == -ENOENT) ? R2S_REASON_NO_DEVICE : R2S_REASON_NO_RESOURCES;
    l->no_offer = true;
    set_tx(l, R2S_TX_PLAIN);
    return rc;
  }
  uint8_t frame[256];
  int len = r2s__handshake_encode(&hs, frame, sizeof frame);
  if (len < 0 || (size_t)len > sizeof l->tx_pending - l->tx_pending_len) {
    tp->release(st);
    set_tx(l, R2S_TX_PLAIN);
    return len < 0 ? len : -ENOBUFS;
  }
  ssize_t n = k_send(fd, &mark, 1, MSG_OOB);
  keep_sock_err(l, n);
  if (n != 1) { /* the send buffer is full: try again on a later write */
    tp->release(st);
    return n < 0 ? (int)n : -EAGAIN;
  }
  /* tp first: a reader without the locks (r2s__link_peer_shares_cpu, from
   * another thread's wait) that sees tps calls through tp. */
  __atomic_store_n(&l->tp, tp, __ATOMIC_RELEASE);
  __atomic_store_n(&l->tps, st, __ATOMIC_RELEASE);
  size_buffers(l, tp, st, fd);
  queue_ctrl(l, frame, (size_t)len);
  __atomic_store_n(&l->framed_at, r2s__now_ns(), __ATOMIC_RELAXED);
  set_tx(l, R2S_TX_FRAMES);
  /* From now on this direction of TCP carries the shim's frames, doorbells
   * above all: a doorbell held back by Nagle until the peer's delayed ACK
   * costs 40 ms. The application's own TCP_NODELAY/TCP_CORK (set on this
   * socket or, for an accepted one, on its listener) are kept aside for it
   * (r2s__link_set_tcp_opt) until the direction goes plain again. */
  l->tcp_nodelay = kernel_tcp_opt(fd, TCP_NODELAY);
  l->tcp_cork = kernel_tcp_opt(fd, TCP_CORK);
  int one = 1, zero = 0;
  (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
  (void)flush_ctrl(l, fd);
  r2s__debug("switched the send direction (%s handshake, %d bytes)", tp->name, len);
  connect_tp_locked(l, fd);
  return 0;
}

/* May the peer's ring, which attach() could not open (rc), be had by
 * descriptor? Only where that is why (another user's segment, or another
 * /dev/shm: not there by that name), the peer can hand it over, and the
 * process may still make the calls it takes (sandbox.h). */
static bool may_fetch(const r2s_link_t *l, int rc)
{
  return (rc == -EPERM || rc == -EACCES || rc == -ENOENT) && (l->peer_hs.caps & R2S_CAP_SHM_FD) && TP(l)->fetch &&
         !r2s__sandboxed();
}

/* Asks the peer for its ring by descriptor (a FETCH frame with the
 * address of a socket that waits for it); 0 once asked. tx_lock held, no
 * DATA frame half sent. */
static int ask_for_ring_locked(r2s_link_t *l, int fd, int attach_rc)
{
  r2s_fetch_t ask;
  uint8_t f[R2S_FRAME_HDR_LEN + 1 + R2S_FETCH_ADDR_MAX];
  int rc = TP(l)->fetch(TPS(l), &ask);
  int len = rc < 0 ? rc : r2s__fetch_encode(&ask, f, sizeof f);
  if (len < 0 || queue_ctrl(l, f, (size_t)len) < 0) {
    r2s__debug("cannot ask the peer for its ring by descriptor (%s)", strerror(len < 0 ? -len : ENOBUFS));
    return -1;
  }
  l->attach_rc = attach_rc;
  __atomic_store_n(&l->fetch, R2S_FETCH_ASKED, __ATOMIC_RELEASE);
  (void)flush_ctrl(l, fd);
  r2s__debug("cannot open the peer's ring by name (%s): asked for it by descriptor", strerror(-attach_rc));
  return 0;
}

/* Once both rings are known, the send direction moves into the peer's
 * ring: a RING frame tells the peer where its reading continues. A ring
 * that cannot be opened by name may be asked for by descriptor first
 * (may_fetch); until the peer's HANDED answers, the direction stays on
 * DATA frames. */
static void try_ring_tx(r2s_link_t *l, int fd)
{
  send_ready_locked(l, fd);
  send_handed_locked(l, fd);
  if (l->tx_state != R2S_TX_FRAMES || !__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE) ||
      l->tx_data_left || l->no_ring || l->plain_unsent)
    return;
  int fetch = __atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE);
  if (fetch == R2S_FETCH_ASKED) return;
  /* Writes into a ring whose end is not ready would be lost (RDMA: the
   * peer's queue pair drops them until it has read our handshake). */
  if (TP(l)->needs_ready && !__atomic_load_n(&l->peer_ready, __ATOMIC_ACQUIRE)) return;
  r2s_hostid_t me;
  r2s_handshake_t mine;
  memset(&mine, 0, sizeof mine);
  if (r2s__hostid(&me) == 0) memcpy(mine.boot_id, me.boot_id, 16), mine.netns = me.netns;
  if (!TP(l)->reaches(&mine, &l->peer_hs)) { /* another host or namespace, or no offer */
    __atomic_store_n(&l->no_ring, true, __ATOMIC_RELEASE);
    l->tcp_reason = R2S_REASON_UNREACHABLE;
    if (send_decline_locked(l, fd, 1)) unframe_declined_locked(l, fd, R2S_REASON_UNREACHABLE);
    return;
  }
  int rc = fetch == R2S_FETCH_DONE ? l->fetch_rc : TP(l)->attach(TPS(l), &l->peer_hs);
  if (rc < 0 && fetch == R2S_FETCH_NONE && may_fetch(l, rc) && ask_for_ring_locked(l, fd, rc) == 0) return;
  if (rc < 0) {
    /* A fetch that failed leaves attach()'s reason standing. */
    if (fetch == R2S_FETCH_DONE) rc = l->attach_rc;
    r2s__debug("cannot attach the peer's ring (%s): staying on TCP frames", strerror(-rc));
    __atomic_store_n(&l->no_ring, true, __ATOMIC_RELEASE); /* do not try again */
    /* A peer running as another user cannot share memory with us: that is
     * the isolation working, not a shortage. */
    l->tcp_reason = (rc == -EACCES || rc == -EPERM) ? R2S_REASON_OTHER_USER : R2S_REASON_NO_RESOURCES;
    if (send_decline_locked(l, fd, 2) && l->tcp_reason == R2S_REASON_OTHER_USER &&
        TP(l)->path == R2S_PATH_SHM)
      unframe_declined_locked(l, fd, R2S_REASON_OTHER_USER);
    return;
  }
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode(R2S_FRAME_RING, 0, f, sizeof f);
  if (queue_ctrl(l, f, sizeof f) < 0) return;
  __atomic_store_n(&l->ring_unsent, true, __ATOMIC_RELEASE);
  set_tx(l, R2S_TX_RING);
  mark_upgraded(l);
  (void)flush_ctrl(l, fd);
  r2s__debug("send direction now in the peer's %s ring", TP(l)->name);
}

/* ---- receive side ---- */

/* Is a read of the socket worth a system call? While the ring carries the
 * data, TCP brings only doorbells (after we asked for one), the end of the
 * stream or a rare control frame. So we look after arming, after the
 * kernel said the socket is readable, and every 64th time anyway (an
 * application that never waits must still see the end of the stream). */
static bool pump_is_due(r2s_link_t *l)
{
  if (__atomic_exchange_n(&l->pump_due, 0, __ATOMIC_ACQ_REL)) return true;
  return (++l->idle_looks & 63) == 0;
}

void r2s__link_pump_due(r2s_link_t *l)
{
  __atomic_store_n(&l->pump_due, 1, __ATOMIC_RELEASE);
}

static int handle_handshake(r2s_link_t *l, int fd, const uint8_t *p, uint32_t len)
{
  if (__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) return -EPROTO;
  int rc = r2s__handshake_decode(p, len, &l->peer_hs);
  if (rc < 0) return rc;
  __atomic_store_n(&l->have_peer_hs, true, __ATOMIC_RELEASE);
  __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
  /* rx_lock is held: taking tx_lock is in lock order. */
  pthread_mutex_lock(&l->tx_lock);
  if (l->tx_state == R2S_TX_PROBE && policy_allows_switch(l) && !l->closing) (void)switch_tx(l, fd);
  connect_tp_locked(l, fd);
  /* The peer switched and waits for our HANDSHAKE, which an end that uses
   * urgent data or has no ring to offer never sends: the interlude tells
   * it (without offers, so its direction goes plain too). */
  if (l->tx_state == R2S_TX_PLAIN && (l->app_oob || l->no_offer)) l->interlude_owed = true;
  (void)send_interlude_locked(l, fd);
  try_ring_tx(l, fd);
  pthread_mutex_unlock(&l->tx_lock);
  return 0;
}

/* Reads one frame header (and a control frame's payload) if it is all
 * there. Returns the frame type, 0 at end of stream, -EAGAIN, or -errno. */
static int read_frame(r2s_link_t *l, int fd, r2s_frame_hdr_t *h)
{
  while (l->rx_hdr_len < R2S_FRAME_HDR_LEN) {
    ssize_t n = k_recv(fd, l->rx_hdr + l->rx_hdr_len, R2S_FRAME_HDR_LEN - l->rx_hdr_len, 0);
    if (n < 0) keep_sock_err(l, n);
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
      ssize_t n = k_recv(fd, l->rx_ctrl + l->rx_ctrl_len, h->len - l->rx_ctrl_len, 0);
      if (n < 0) keep_sock_err(l, n);
      if (n <= 0) return n == 0 ? 0 : (int)n;
      l->rx_ctrl_len += (uint32_t)n;
    }
  }
  l->rx_hdr_len = 0;
  l->rx_ctrl_len = 0;
  return h->type;
}

/* The peer cannot open our ring by name and asks for it by descriptor
 * (FETCH): it goes to the socket the peer names, and HANDED tells the
 * peer the nonce that proves it came from us, or that it did not come.
 * Once per connection, before the peer's RING. rx_lock held. */
static int handle_fetch(r2s_link_t *l, int fd, const uint8_t *p, uint32_t len)
{
  r2s_fetch_t ask;
  if (l->handed || !TPS(l) || !TP(l)->hand_over || l->rx_state != R2S_RX_FRAMES || r2s__fetch_decode(p, len, &ask) < 0)
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
  pthread_mutex_lock(&l->tx_lock); /* rx_lock held: in lock order */
  l->handed_msg = msg;
  l->handed_owed = true;
  send_handed_locked(l, fd);
  pthread_mutex_unlock(&l->tx_lock);
  return 0;
}

/* The end of our FETCH: the peer's ring came by descriptor (then we move
 * into it as after attach), or it did not (rc < 0: we decline as attach's
 * failure would have had us). rx_lock held. */
static void fetch_done(r2s_link_t *l, int fd, const r2s_handed_t *msg, int rc)
{
  pthread_mutex_lock(&l->tx_lock);
  /* Also when it failed: the socket we waited on closes (a sandboxed
   * process only closes it: accepting is not its own call). Not once
   * the reaper reads the closed connection on (reap_read): a ring taken
   * then would carry nothing. */
  bool take = !rc && msg && !r2s__sandboxed() && !__atomic_load_n(&l->reaped, __ATOMIC_ACQUIRE);
  int got = TP(l)->fetched(TPS(l), &l->peer_hs, take ? msg->nonce : NULL);
  if (take) rc = got;
  else if (!rc) rc = -EPERM;
  if (rc < 0)
    r2s__debug("the peer's ring did not come by descriptor (%s)", strerror(-rc));
  else
    R2S_STAT_INC(rings_by_fd);
  l->fetch_rc = rc;
  __atomic_store_n(&l->fetch, R2S_FETCH_DONE, __ATOMIC_RELEASE);
  try_ring_tx(l, fd);
  pthread_mutex_unlock(&l->tx_lock);
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
static int handle_control(r2s_link_t *l, int fd, const r2s_frame_hdr_t *h)
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
    mark_upgraded(l);
    r2s__debug("receive direction now in our %s ring", TP(l)->name);
    return RETRY;
  case R2S_FRAME_DECLINE:
    l->peer_passed_mark = true;
    return 0;
  case R2S_FRAME_READY:
    if (h->len || !TPS(l)) return -EPROTO;
    __atomic_store_n(&l->peer_ready, true, __ATOMIC_RELEASE);
    pthread_mutex_lock(&l->tx_lock); /* rx_lock held: in lock order */
    try_ring_tx(l, fd);
    pthread_mutex_unlock(&l->tx_lock);
    return 0;
  case R2S_FRAME_PLAIN:
    if (r2s__frame_u64_decode(l->rx_ctrl, h->len, &v) < 0) return -EPROTO;
    if (l->rx_state == R2S_RX_FRAMES) {
      if (v != 0 || l->rx_data_left) return -EPROTO;
      set_rx(l, R2S_RX_PLAIN);
      settle_plain(l);
      /* No HANDED can come behind it: our ring by descriptor is off. */
      if (__atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE) == R2S_FETCH_ASKED) fetch_done(l, fd, NULL, -ECONNABORTED);
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
  case R2S_FRAME_CREDIT:
  case R2S_FRAME_FIN:
    return 0;
  default:
    return -EPROTO;
  }
}

/* PROBE and PREMARK: application bytes, while watching for the peer's
 * urgent marks with the peek-then-mark procedure of docs/protocol.md. */
static ssize_t rx_premark(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
  ssize_t n = r2s__libc.recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) {
    n = -errno;
    if (n != -EAGAIN) return n;
  }
  int urg = -EINVAL;
  int mark = mark_here(fd, &urg);
  if (mark < 0) return mark;
  if (urg == -EINVAL && (n <= 0 || l->rx_state == R2S_RX_PROBE)) urg = urgent_peek(fd);
  /* A reset connection keeps its unread bytes, which plain TCP delivers
   * before it reports the reset, but the kernel no longer answers for its
   * urgent byte (ENOTCONN). Bytes in front of the mark are the
   * application's whatever the mark is; at the mark, the byte itself says
   * whether frames follow. */
  if (urg == -ENOTCONN) urg = mark ? urgent_after_reset(fd) : -EINVAL;
  if (urg < 0 && urg != -EINVAL && urg != -EAGAIN) return urg == -ENOTCONN ? -ECONNRESET : urg;
  if (urg >= 0 && !note_urgent(l, fd, urg, mark)) {
    /* Urgent data that is not ours: the peer application uses it. */
    peer_is_plain(l, fd, R2S_REASON_APP_OOB);
    return RETRY;
  }
  if (urg >= 0 || urg == -EAGAIN) {
    __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
    if (l->rx_state == R2S_RX_PROBE) {
      set_rx(l, R2S_RX_PREMARK);
      /* A receiver need not wait for its next write to offer its ring: the
       * peer may be about to send it a large response (rx_lock held, tx_lock
       * in lock order). */
      pthread_mutex_lock(&l->tx_lock);
      (void)greet_locked(l, fd);
      if (l->tx_state == R2S_TX_PROBE && policy_allows_switch(l) && !l->closing && switch_tx(l, fd) == 0)
        l->tx_writes = 0, l->tx_probe_at = 1;
      pthread_mutex_unlock(&l->tx_lock);
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
    peer_is_plain(l, fd, R2S_REASON_PEER_PLAIN);
  }
  if (n == 0 && !mark) set_rx_eof(l); /* not with a lone hello still to take (r2s__link_close) */
  if (n <= 0) return n; /* 0: end of stream; -EAGAIN */
  if (flags & MSG_PEEK) return n;
  /* Consume exactly what was peeked: the bytes are already in the
   * caller's buffer, and no mark can lie inside them. */
  ssize_t k = k_recv(fd, NULL, (size_t)n, MSG_TRUNC);
  if (k != n) return k < 0 ? k : -EPROTO;
  __atomic_store_n(&l->rx_consumed, l->rx_consumed + (uint64_t)n, __ATOMIC_RELAXED); /* r2s__link_reason */
  return n;
}

/* FRAMES: application bytes are the payloads of DATA frames. */
static ssize_t rx_frames(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags)
{
  for (;;) {
    if (l->rx_data_left) {
      ssize_t n = k_recv_iov(fd, iov, cnt, l->rx_data_left, flags & MSG_PEEK);
      if (n > 0 && !(flags & MSG_PEEK)) l->rx_data_left -= (uint32_t)n;
      if (n == 0) set_rx_eof(l); /* the peer died inside a frame */
      return n;
    }
    r2s_frame_hdr_t h;
    int t = read_frame(l, fd, &h);
    if (t == 0) {
      set_rx_eof(l);
      return 0;
    }
    if (t < 0) return t;
    if (t == R2S_FRAME_DATA) {
      l->rx_data_left = h.len;
      continue;
    }
    int rc = handle_control(l, fd, &h);
    if (rc) return rc;
  }
}

/* Reads the control frames waiting on TCP while the ring carries the data.
 * Returns 0, or -errno for a broken stream. */
static int pump_control(r2s_link_t *l, int fd)
{
  /* After PLAIN, TCP carries the application's bytes again (once the ring
   * is read up to the offset): they are not frames. */
  if (l->rx_plain_pending) return 0;
  while (!l->rx_eof) {
    r2s_frame_hdr_t h;
    int t = read_frame(l, fd, &h);
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
    int rc = handle_control(l, fd, &h);
    if (rc < 0 && rc != RETRY) return rc;
    if (l->rx_plain_pending) return 0; /* what follows PLAIN is not ours to read */
  }
  return 0;
}

/* After taking bytes out of our ring: a producer waiting for room gets a
 * doorbell. rx_lock held; tx_lock in order. */
static void credit_wakeup(r2s_link_t *l, int fd)
{
  if (!TP(l)->take_peer_tx_sleeper(TPS(l))) return;
  pthread_mutex_lock(&l->tx_lock);
  send_doorbell_locked(l, fd);
  pthread_mutex_unlock(&l->tx_lock);
}

/* The peer went back to plain TCP after its ring's first rx_plain_at bytes
 * (PLAIN frame): the ring is read up to there, then the kernel takes over. */
static bool ring_ends_here(r2s_link_t *l, size_t *want)
{
  if (!l->rx_plain_pending) return false;
  uint64_t consumed = TP(l)->consumed(TPS(l));
  if (consumed >= l->rx_plain_at) {
    set_rx(l, R2S_RX_PLAIN);
    settle_plain(l);
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
    if (ring_ends_here(l, &want)) return RETRY;
    ssize_t n = TP(l)->get(TPS(l), iov, cnt, want, peek);
    if (n > 0) {
      if (!peek) credit_wakeup(l, fd);
      return n;
    }
    if (n < 0) return n;
    if (TP(l)->peer_tx_closed(TPS(l)) || l->rx_eof) {
      /* End of stream only once the ring is empty after seeing it. */
      n = TP(l)->get(TPS(l), iov, cnt, want, peek);
      if (n == 0 && l->rx_err) {
        /* The kernel reports its error once, then the end of the stream;
         * the same error kept for the application (keep_sock_err) is
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
    if (pass > 0 || !pump_is_due(l)) break;
    int rc = pump_control(l, fd);
    if (rc < 0) return rc;
    if (l->rx_plain_pending && ring_ends_here(l, &want)) return RETRY;
  }
  return -EAGAIN;
}

/* One read of the stream as the receive direction's state has it; -EPROTO
 * and the like fail the link. rx_lock held. */
static ssize_t recv_by_state(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                             r2s_link_moved_t *mv)
{
  ssize_t n;
  int st = l->rx_state;
  switch (st) {
  case R2S_RX_PROBE:
  case R2S_RX_PREMARK:
    n = rx_premark(l, fd, iov, cnt, flags);
    break;
  case R2S_RX_FRAMES:
    n = rx_frames(l, fd, iov, cnt, flags);
    break;
  case R2S_RX_RING:
    n = rx_ring(l, fd, iov, cnt, flags);
    break;
  default: {
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    oobinline_to_kernel(l, fd);
    settle_plain(l);
    n = r2s__libc.recvmsg(fd, &m, flags | MSG_DONTWAIT);
    if (n < 0) n = -errno;
    if (n == 0) set_rx_eof(l);
  }
  }
  if (n == -EPROTO || n == -EPROTONOSUPPORT || n == -ENOMEM)
    fail(l, (int)n, l->rx_state == R2S_RX_RING ? "bad frame or ring index from the peer" : "bad frame from the peer");
  /* rx_ring hands out ring bytes only; a state it leaves returns RETRY. */
  if (n > 0 && st == R2S_RX_RING && mv) mv->ring += (size_t)n, mv->ring_path = TP(l)->path;
  return n;
}

/* After `got` bytes from the read-ahead buffer, the bytes behind them, as
 * far as the caller has room: a read returns what is there, and a peek
 * just before may have seen bytes on both sides of the buffer's end (the
 * buffer filled between the two, by a sender in another thread). Only
 * where bytes are known to wait, so that an error or the end of the stream
 * the kernel reports once is left for the next read. rx_lock held. */
static size_t recv_past_ahead(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, size_t got, int flags,
                              r2s_link_moved_t *mv)
{
  /* The caller's room is full, or (the same, for a peek) the buffer has
   * more than it took. */
  if (got >= r2s__iov_total(iov, cnt) || FAILED(l)) return 0;
  int queued = 0;
  bool more = l->rx_state == R2S_RX_RING ? TP(l)->avail(TPS(l)) > 0
                                         : r2s__libc.ioctl(fd, FIONREAD, &queued) == 0 && queued > 0;
  if (!more) return 0;
  struct iovec rest[64];
  int k = r2s__iov_advance(rest, 64, iov, cnt, got);
  ssize_t n = recv_by_state(l, fd, rest, k, flags, mv);
  return n > 0 ? (size_t)n : 0;
}

ssize_t r2s__link_recv(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv)
{
  if (mv) *mv = (r2s_link_moved_t){0};
  /* Each state reads 0 from below as the end of the stream and keeps it
   * (rx_eof): an empty read would end the stream for good. */
  if (r2s__iov_total(iov, cnt) == 0) return -EINVAL;
  pthread_mutex_lock(&l->rx_lock);
  ssize_t n;
  do {
    if (FAILED(l)) {
      n = FAILED(l);
      break;
    }
    if (r2s__readahead_len(&l->rx_ahead)) {
      /* Bytes a sender read ahead come before all the socket or ring hold. */
      n = (ssize_t)r2s__readahead_take(&l->rx_ahead, iov, cnt, flags & MSG_PEEK);
      if (n && !r2s__readahead_len(&l->rx_ahead) && l->rx_state == R2S_RX_PLAIN) settle_plain(l);
      if (n) {
        n += (ssize_t)recv_past_ahead(l, fd, iov, cnt, (size_t)n, flags, mv);
        break;
      }
    }
    n = recv_by_state(l, fd, iov, cnt, flags, mv);
  } while (n == RETRY);
  if (n == -EPROTO || n == -EPROTONOSUPPORT || n == -ENOMEM) n = FAILED(l);
  /* After shutdown(SHUT_RD) TCP still hands out what is queued, then the
   * end of the stream; it never waits. So do we: bytes already in the ring
   * (or in TCP) first. A thread that peeked them must be able to read them
   * even if another thread shut the socket down in between. */
  if (n == -EAGAIN && l->rx_shut) n = 0;
  n = give_sock_err(l, n);
  if (n < 0) settle_plain(l);
  pthread_mutex_unlock(&l->rx_lock);
  return n;
}

/* A sender whose application never reads (iperf3's data connection) must
 * still see the peer's handshake and RING frames. Called without tx_lock;
 * only tries rx_lock (a reader that holds it is reading those frames). It
 * reads control frames only: application bytes stay for the application. */
void r2s__link_pump(r2s_link_t *l, int fd)
{
  pump_from_sender(l, fd, false);
}

/* read_ahead: the caller waits for a frame of the peer (see
 * read_ahead_premark) and may take application bytes in front of it. */
static void pump_from_sender(r2s_link_t *l, int fd, bool read_ahead)
{
  if (pthread_mutex_trylock(&l->rx_lock) != 0) return;
  size_t had = r2s__readahead_len(&l->rx_ahead);
  read_control_locked(l, fd, read_ahead);
  size_t has = r2s__readahead_len(&l->rx_ahead);
  pthread_mutex_unlock(&l->rx_lock);
  if (has > had) r2s__debug("read %zu application bytes ahead of the peer's frames (%zu held)", has - had, has);
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
 * direction never turns plain with bytes in the buffer (settle_plain).
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
    ssize_t n = rx_premark(l, fd, &v, 1, st == R2S_RX_PROBE ? MSG_PEEK : 0);
    if (n == RETRY) continue;
    if (n <= 0) {
      if (n == -EPROTO) fail(l, (int)n, "bad frame from the peer");
      return;
    }
    if (st == R2S_RX_PROBE) {
      if (l->rx_state == R2S_RX_PROBE) return;
      continue; /* it is a shim (PREMARK): now take the bytes */
    }
    r2s__readahead_commit(&l->rx_ahead, (size_t)n);
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
static void read_control_locked(r2s_link_t *l, int fd, bool read_ahead)
{
  if (read_ahead) read_ahead_premark(l, fd);
  int st = l->rx_state;
  if (st == R2S_RX_PROBE || st == R2S_RX_PREMARK) {
    /* At the switch mark with nothing in front of it? */
    int urg = -EINVAL;
    if (mark_here(fd, &urg) == 1 && urg == R2S_SWITCH_BYTE) {
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
        ssize_t n = k_recv(fd, p, room < l->rx_data_left ? room : l->rx_data_left, 0);
        if (n <= 0) {
          if (n == 0) set_rx_eof(l); /* the peer died inside a frame */
          break; /* -EAGAIN, or the kernel's error, which the reader meets */
        }
        r2s__readahead_commit(&l->rx_ahead, (size_t)n);
        l->rx_data_left -= (uint32_t)n;
        continue;
      }
      r2s_frame_hdr_t h;
      int t = read_frame(l, fd, &h);
      if (t <= 0) {
        if (t == 0)
          set_rx_eof(l);
        else if (t != -EAGAIN)
          fail(l, t, "bad frame from the peer");
        break;
      }
      if (t == R2S_FRAME_DATA) {
        l->rx_data_left = h.len;
        if (!ahead) break;
        continue;
      }
      ahead = false;
      int rc = handle_control(l, fd, &h);
      if (rc == RETRY) break;
      if (rc < 0) {
        fail(l, rc, "bad frame from the peer");
        break;
      }
    }
    st = l->rx_state; /* after RING: the frames behind it too */
  }
  if (st == R2S_RX_RING && !FAILED(l)) {
    int rc = pump_control(l, fd);
    if (rc < 0) fail(l, rc, "bad frame from the peer");
  }
}

/* ---- send side ---- */

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
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)trim_iov(v, iov, cnt, l->tx_data_left)};
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
  int k = trim_iov(v + 1, iov, cnt, len);
  struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)k + 1};
  ssize_t n = r2s__libc.sendmsg(fd, &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0) return -errno;
  if ((size_t)n < sizeof hdr) { /* part of the header: the rest goes first next time */
    queue_ctrl(l, hdr + n, sizeof hdr - (size_t)n);
    l->tx_data_left = (uint32_t)len;
    return -EAGAIN;
  }
  size_t app = (size_t)n - sizeof hdr;
  l->tx_data_left = (uint32_t)(len - app);
  return (ssize_t)app;
}

/* The kernel's error for a socket whose peer is gone (its reset, or the
 * one a call of the shim's took, keep_sock_err), or EPIPE once that was
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
    pthread_mutex_unlock(&l->tx_lock);
    (void)r2s__libc.poll(&p, 1, RESET_WAIT_MS);
    pthread_mutex_lock(&l->tx_lock);
    return RETRY;
  }
  __atomic_store_n(&l->peer_gone, 1, __ATOMIC_RELEASE);
  if (reset) return -ECONNRESET;
  return len ? (ssize_t)len : -EPIPE;
}

ssize_t r2s__link_send(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv)
{
  if (mv) *mv = (r2s_link_moved_t){0};
  pthread_mutex_lock(&l->tx_lock);
  /* The kernel checks for an error before it takes a byte. */
  ssize_t n = __atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE) ? -EAGAIN : RETRY;
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
      if (!__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE) && ++l->tx_writes >= l->tx_probe_at) {
        int urg = urgent_peek(fd);
        if ((urg >= 0 && note_urgent(l, fd, urg, -1)) || urg == -EAGAIN)
          __atomic_store_n(&l->peer_shim, 1, __ATOMIC_RELEASE);
        l->tx_probe_at = next_probe(l->tx_writes);
      }
      if (__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE) && policy_allows_switch(l) &&
          switch_tx(l, fd) == 0) {
        l->tx_writes = 0, l->tx_probe_at = 1;
        continue;
      }
      if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN) {
        set_tx(l, R2S_TX_PLAIN);
        settle_plain(l);
      } else {
        (void)greet_locked(l, fd); /* a server that speaks first: the hello goes first */
      }
      n = tx_plain(fd, iov, cnt, flags);
      if (n > 0) __atomic_store_n(&l->tx_plain_bytes, l->tx_plain_bytes + (uint64_t)n, __ATOMIC_RELAXED);
      break;
    case R2S_TX_FRAMES: {
      int rc = flush_ctrl(l, fd);
      if (rc < 0) {
        n = rc;
        break;
      }
      if (l->tx_state != R2S_TX_FRAMES) continue; /* our PLAIN frame left: TCP from here */
      /* The peer's handshake (or READY) may be waiting unread on our side.
       * Looked for at doubling intervals, so a peer that never sends one
       * costs little, and at least every PROBE_BYTES, so large writes do
       * not run on over TCP long after the ring is ready. */
      if (awaits_peer(l) && (++l->tx_writes >= l->tx_probe_at || l->tx_frame_bytes >= PROBE_BYTES)) {
        l->tx_probe_at = next_probe(l->tx_writes);
        l->tx_frame_bytes = 0;
        pthread_mutex_unlock(&l->tx_lock); /* lock order: rx before tx */
        pump_from_sender(l, fd, true);
        pthread_mutex_lock(&l->tx_lock);
        continue;
      }
      try_ring_tx(l, fd);
      /* Into the ring, or back to plain TCP behind a PLAIN frame (which may
       * still wait in the queue: nothing may pass it). */
      if (l->tx_state != R2S_TX_FRAMES || l->plain_unsent) continue;
      n = tx_frames(l, fd, iov, cnt, flags);
      if (n > 0) l->tx_frame_bytes += (uint64_t)n;
      break;
    }
    case R2S_TX_RING: {
      int rc = flush_ctrl(l, fd);
      if (rc < 0 && (rc != -EAGAIN || !r2s__link_tx_in_ring(l))) {
        n = rc;
        break;
      }
      if (l->tx_state != R2S_TX_RING) continue; /* our PLAIN frame left: TCP from here */
      n = TP(l)->put(TPS(l), iov, cnt, 0, r2s__iov_total(iov, cnt));
      if (n == -EPIPE)
        n = peer_closed_locked(l, fd, r2s__iov_total(iov, cnt));
      else if (n == 0)
        n = __atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE) ? gone_error(l, fd) : -EAGAIN;
      if (n > 0 && mv) mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
      if (n > 0 && TP(l)->take_peer_rx_sleeper(TPS(l))) send_doorbell_locked(l, fd);
      /* The ring cannot take more (shm: no room in /dev/shm for its
       * rest): the bytes go on over TCP, behind the ones in the ring. A
       * full control queue is flushed first, by a retry. */
      if (n == -ENOSPC) {
        n = queue_plain_locked(l, R2S_REASON_NO_RESOURCES) == 0 ? RETRY : -EAGAIN;
        continue;
      }
      if (n == -EPROTO) { /* the application sees a reset, as on TCP */
        fail_tx(l, (int)n, "the peer broke its ring");
        n = -ECONNRESET;
      }
      break;
    }
    default: {
      /* An interlude still owed (its mark found the socket full) or half
       * sent goes first: no application byte may land inside its frames. */
      int rc = l->tx_pending_len ? flush_ctrl(l, fd) : 0;
      if (!rc) rc = send_interlude_locked(l, fd);
      if (!rc && l->tx_pending_len) rc = flush_ctrl(l, fd);
      n = rc == -EAGAIN ? rc : tx_plain(fd, iov, cnt, flags);
    }
    }
  }
  n = give_sock_err(l, n);
  if (n < 0) settle_plain(l);
  pthread_mutex_unlock(&l->tx_lock);
  return n;
}

/* The application's first byte on the connection is urgent, and our
 * hello is still owed (an accepting end that has not written yet): the
 * hello goes first, as in front of any first byte of a server that speaks
 * first, so that the application's byte does not stand at the start of
 * the stream, where one of a hello's value would pass for it
 * (shim_urgent_here). Whether the client runs the shim need not be known:
 * its hello may still be on its way (a nonblocking connect is seen
 * complete late), and at a plain client the kernel steps over our hello,
 * unread, when the application's urgent byte replaces it. Only while the
 * kernel says that no byte ever left: a hello behind bytes would not be
 * at the start, and, replaced, would be left in the stream as data.
 * tx_lock held. */
static void greet_before_urgent_locked(r2s_link_t *l, int fd)
{
  if (!l->hello_owed || l->tp || l->interlude_sent || !r2s__tcp_never_sent(fd)) return;
  const unsigned char hello = hello_byte(l);
  ssize_t n = k_send(fd, &hello, 1, MSG_OOB);
  if (n == 1)
    __atomic_store_n(&l->hello_owed, false, __ATOMIC_RELEASE);
  else
    keep_sock_err(l, n);
}

void r2s__link_app_oob(r2s_link_t *l, int fd)
{
  /* Only the send direction can be kept from switching: the peer decides
   * about the other one, and its switch mark must still be found. If the
   * peer already switched towards us, it must hear that we passed its mark
   * (the interlude), or its own urgent data would have to wait forever. */
  int rx = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&l->tx_lock);
  l->app_oob = true;
  if (l->tx_state == R2S_TX_PROBE) {
    if (!l->tcp_reason) l->tcp_reason = R2S_REASON_APP_OOB;
    set_tx(l, R2S_TX_PLAIN);
    if (rx == R2S_RX_FRAMES || rx == R2S_RX_RING) l->interlude_owed = true;
  }
  if (fd >= 0) (void)send_interlude_locked(l, fd);
  settle_plain(l);
  pthread_mutex_unlock(&l->tx_lock);
}

int r2s__link_set_oobinline(r2s_link_t *l, int fd, bool on)
{
  pthread_mutex_lock(&l->rx_lock);
  bool kept = l->rx_state != R2S_RX_PLAIN || __atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE);
  if (kept) __atomic_store_n(&l->app_oobinline, on, __ATOMIC_RELEASE);
  oobinline_to_kernel(l, fd);
  settle_plain(l);
  pthread_mutex_unlock(&l->rx_lock);
  if (kept) return 0;
  int v = on;
  return r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, sizeof v) < 0 ? -errno : 0;
}

int r2s__link_oobinline(r2s_link_t *l)
{
  return __atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) ? 1 : -1;
}

int r2s__link_set_tcp_opt(r2s_link_t *l, int fd, int name, int v)
{
  pthread_mutex_lock(&l->tx_lock);
  int rc = 0;
  if (carries_frames(l)) {
    if (name == TCP_NODELAY)
      l->tcp_nodelay = v != 0;
    else
      l->tcp_cork = v != 0;
  } else {
    rc = r2s__libc.setsockopt(fd, IPPROTO_TCP, name, &v, sizeof v);
  }
  pthread_mutex_unlock(&l->tx_lock);
  return rc;
}

int r2s__link_tcp_opt(r2s_link_t *l, int name)
{
  pthread_mutex_lock(&l->tx_lock);
  int v = !carries_frames(l) ? -1 : name == TCP_NODELAY ? l->tcp_nodelay : l->tcp_cork;
  pthread_mutex_unlock(&l->tx_lock);
  return v;
}

bool r2s__link_urgent_is_shims(r2s_link_t *l, int fd)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN ||
      __atomic_load_n(&l->rx_plain_pending, __ATOMIC_ACQUIRE))
    return false;
  int urg = urgent_peek(fd);
  return urg >= 0 && shim_urgent_here(fd, urg, -1);
}

int r2s__link_atmark(r2s_link_t *l, int fd)
{
  /* Control frames in front of the application's next byte (a PLAIN frame
   * above all) are read first: the mark is judged where the application
   * really is. */
  pump_from_sender(l, fd, false);
  pthread_mutex_lock(&l->rx_lock);
  if (l->rx_state == R2S_RX_RING && l->rx_plain_pending) {
    size_t want = 1;
    (void)ring_ends_here(l, &want);
  }
  int st = l->rx_state, v = 0;
  size_t ahead = r2s__readahead_len(&l->rx_ahead);
  pthread_mutex_unlock(&l->rx_lock);
  /* Bytes read ahead lie in front of any mark the kernel knows: the
   * application reaches it only after reading them. */
  if (ahead) return 0;
  if ((st == R2S_RX_PLAIN || st == R2S_RX_PROBE || st == R2S_RX_PREMARK) &&
      r2s__libc.ioctl(fd, SIOCATMARK, &v) < 0)
    return -errno;
  /* In PROBE/PREMARK a mark of ours (hello) is not the application's. */
  if (v && st != R2S_RX_PLAIN) {
    int urg = urgent_peek(fd);
    if (urg >= 0 && shim_urgent_here(fd, urg, 1)) v = 0;
  }
  return v; /* ring or frames first: the application is not at a mark */
}

ssize_t r2s__link_send_oob(r2s_link_t *l, int fd, const void *buf, size_t len, int flags, bool nonblock)
{
  pthread_mutex_lock(&l->tx_lock);
  int st = l->tx_state;
  greet_before_urgent_locked(l, fd);
  if (st == R2S_TX_PROBE) {
    if (!l->tcp_reason) l->tcp_reason = R2S_REASON_APP_OOB;
    set_tx(l, R2S_TX_PLAIN);
    settle_plain(l);
    st = R2S_TX_PLAIN;
  }
  (void)send_interlude_locked(l, fd);
  if (st == R2S_TX_PLAIN && !l->interlude_sent && !l->interlude_owed) {
    l->app_urgent_sent = true; /* before it leaves: no interlude may follow */
    pthread_mutex_unlock(&l->tx_lock);
    ssize_t n = r2s__libc.send(fd, buf, len, flags);
    return n < 0 ? -errno : n;
  }
  /* The peer must be past our switch mark before a new urgent pointer can
   * replace it (Linux keeps one): wait for its RING or DECLINE. */
  while (!l->peer_passed_mark && !FAILED(l)) {
    /* Our interlude, or its rest, if the socket was full. */
    if (send_interlude_locked(l, fd) == 0) (void)flush_ctrl(l, fd);
    pthread_mutex_unlock(&l->tx_lock);
    pump_from_sender(l, fd, true);
    pthread_mutex_lock(&l->tx_lock);
    if (l->peer_passed_mark || FAILED(l)) break;
    if (nonblock) {
      pthread_mutex_unlock(&l->tx_lock);
      return -EAGAIN;
    }
    pthread_mutex_unlock(&l->tx_lock);
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    r2s__libc.poll(&p, 1, 10);
    pthread_mutex_lock(&l->tx_lock);
  }
  ssize_t rc = FAILED(l) ? FAILED(l) : 0;
  if (!rc && l->tx_data_left) rc = -EAGAIN; /* a DATA frame is half sent */
  if (!rc && l->tx_state == R2S_TX_PLAIN) { /* after an interlude: nothing to end */
    l->app_urgent_sent = true;
    pthread_mutex_unlock(&l->tx_lock);
    ssize_t n = r2s__libc.send(fd, buf, len, flags);
    return n < 0 ? -errno : n;
  }
  /* Once queued, the PLAIN frame is ours to send, whatever this call
   * returns: the ring or the frames end where it says (plain_unsent keeps
   * every other byte out), and the flush that empties the queue turns the
   * direction plain (flush_ctrl). A retry finds it queued, or gone. */
  if (!rc && !l->plain_unsent) rc = queue_plain_locked(l, R2S_REASON_APP_OOB);
  /* The PLAIN frame must be in the socket before the urgent byte. */
  while (!rc && l->tx_pending_len) {
    rc = flush_ctrl(l, fd);
    if (rc == -EAGAIN && !nonblock) {
      struct pollfd p = {fd, POLLOUT, 0};
      r2s__libc.poll(&p, 1, 100);
      rc = 0;
    }
  }
  if (rc) {
    pthread_mutex_unlock(&l->tx_lock);
    return rc;
  }
  l->app_urgent_sent = true;
  pthread_mutex_unlock(&l->tx_lock);
  ssize_t n = r2s__libc.send(fd, buf, len, flags);
  return n < 0 ? -errno : n;
}

/* ---- readiness ---- */

/* A full ring makes us ask the kernel whether the peer is still there
 * (check_peer_alive), a system call. A sender that outruns its reader finds
 * the ring full at almost every look, so between sleeps it asks at most
 * every ALIVE_CHECK_NS; before a sleep (arming) it always asks. */
#define ALIVE_CHECK_NS 50000

static bool alive_check_due(r2s_link_t *l, bool arming)
{
  int64_t now = r2s__now_ns();
  if (!arming && now - __atomic_load_n(&l->alive_checked_at, __ATOMIC_RELAXED) < ALIVE_CHECK_NS) return false;
  __atomic_store_n(&l->alive_checked_at, now, __ATOMIC_RELAXED);
  return true;
}

static short link_poll(r2s_link_t *l, int fd, short events, short *owned, bool arming)
{
  short rev = 0;
  *owned = 0;
  if (FAILED(l)) {
    *owned = events & (POLLIN | POLLOUT);
    return (short)(POLLERR | (events & (POLLIN | POLLOUT)));
  }
  int rx = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
  if ((events & POLLIN) && (rx == R2S_RX_RING || rx == R2S_RX_FRAMES)) {
    *owned |= POLLIN;
    if (pthread_mutex_trylock(&l->rx_lock) == 0) {
      /* Control frames up to the next DATA header, or those behind RING
       * when the ring is empty and a look is due. */
      if ((l->rx_state == R2S_RX_FRAMES && l->rx_data_left == 0) ||
          (l->rx_state == R2S_RX_RING && TP(l)->avail(TPS(l)) == 0 && pump_is_due(l)))
        read_control_locked(l, fd, false);
      size_t one = 1;
      if (l->rx_state == R2S_RX_RING && ring_ends_here(l, &one))
        *owned &= (short)~POLLIN; /* after PLAIN: the kernel's answer stands again */
      if (FAILED(l))
        rev |= POLLIN | POLLERR;
      else if (l->rx_shut || l->rx_eof)
        rev |= POLLIN | (l->rx_err ? POLLERR : 0);
      else if (l->rx_state == R2S_RX_RING)
        rev |= (TP(l)->avail(TPS(l)) != 0 || TP(l)->peer_tx_closed(TPS(l))) ? POLLIN : 0;
      else if (l->rx_data_left) {
        int q = 0;
        if (r2s__libc.ioctl(fd, FIONREAD, &q) == 0 && q > 0) rev |= POLLIN;
      }
      pthread_mutex_unlock(&l->rx_lock);
    } else {
      /* Another thread is reading: report what the ring says; if it is
       * empty the reader will consume any doorbell. */
      if (rx == R2S_RX_RING && TP(l)->avail(TPS(l)) != 0) rev |= POLLIN;
    }
  }
  if ((events & POLLIN) && r2s__readahead_len(&l->rx_ahead)) {
    /* Read ahead: readable although the kernel may hold nothing. */
    *owned |= POLLIN;
    rev |= POLLIN;
  }
  if ((events & POLLOUT) && r2s__link_tx_in_ring(l)) {
    *owned |= POLLOUT;
    ssize_t sp = TP(l)->space(TPS(l));
    if (sp == 0 && alive_check_due(l, arming)) {
      check_peer_alive(l, fd);
      /* It may have read the doorbell that says room came after our look:
       * look again, or we would sleep through it. */
      sp = TP(l)->space(TPS(l));
    }
    if (__atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE))
      rev |= POLLOUT | POLLERR;
    else if (sp != 0)
      rev |= sp < 0 ? POLLOUT | POLLERR : POLLOUT;
  }
  return rev;
}

short r2s__link_poll(r2s_link_t *l, int fd, short events, short *owned)
{
  return link_poll(l, fd, events, owned, false);
}

bool r2s__link_edge_gen(r2s_link_t *l, short bit, uint64_t *gen)
{
  bool ok = false;
  if (FAILED(l) || __atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE)) return false;
  if (bit == POLLOUT) {
    if (!r2s__link_tx_in_ring(l) || pthread_mutex_trylock(&l->tx_lock) != 0) return false;
    ssize_t sp = l->tx_state == R2S_TX_RING ? TP(l)->space(TPS(l)) : -1;
    if (sp >= 0) *gen = TP(l)->produced(TPS(l)) + (uint64_t)sp, ok = true;
    pthread_mutex_unlock(&l->tx_lock);
    return ok;
  }
  if (bit != POLLIN || r2s__readahead_len(&l->rx_ahead) || pthread_mutex_trylock(&l->rx_lock) != 0)
    return false;
  size_t one = 1;
  if (l->rx_state == R2S_RX_RING && !l->rx_shut && !l->rx_eof && !ring_ends_here(l, &one)) {
    ssize_t av = TP(l)->avail(TPS(l));
    if (av >= 0) {
      /* The end of the stream is a change too: it must not pass for the
       * bytes already reported. */
      *gen = (TP(l)->consumed(TPS(l)) + (uint64_t)av) * 2 + (TP(l)->peer_tx_closed(TPS(l)) ? 1 : 0);
      ok = true;
    }
  }
  pthread_mutex_unlock(&l->rx_lock);
  return ok;
}

/* Our ring to the peer is full. A live peer frees room; a dead one never
 * will, and shared memory cannot tell the two apart. TCP can: once the
 * peer's end of stream has come, a frame we send to a closed socket is
 * answered with a reset, which the kernel reports as POLLERR/POLLHUP;
 * a peer that only shut down writing just reads the frame. */
static void check_peer_alive(r2s_link_t *l, int fd)
{
  if (__atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE)) return;
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  if (r2s__libc.poll(&p, 1, 0) < 0) return;
  /* The control frames the peer sent before its end of stream are read
   * before that end is believed, whether a pump is due or not, and even if
   * the application reads no more (its reader stopped at the stream's last
   * byte, in front of RING): a protocol error among them (a PLAIN past the
   * ring) must end the connection as one, with its warning, not pass for a
   * peer that merely went away. While another thread holds rx_lock, the
   * verdict waits for the next look. */
  bool ended = (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0;
  /* Otherwise, when due: a writer that never reads (iperf3's sender) must
   * still take the doorbells meant for it off the socket, whether the
   * peer's bytes come in frames or through its ring, or the kernel keeps
   * calling the socket readable and every later sleep returns at once.
   * Application bytes in DATA frames in front of them are read ahead
   * (readahead.h), as for the peer's handshake: iperf2's server sends a
   * 28-byte reply its client reads only at the end, and when it left
   * before the server's direction reached the ring, the client's doorbells
   * lay behind it and its writer's sleeps returned at once (13,000 in a
   * 3 s run between two guests, each announced to the peer, and half the
   * throughput). */
  if (pthread_mutex_trylock(&l->rx_lock) == 0) {
    int st = l->rx_state;
    if (ended || ((st == R2S_RX_RING || st == R2S_RX_FRAMES) && pump_is_due(l)))
      read_control_locked(l, fd, true);
    pthread_mutex_unlock(&l->rx_lock);
  } else if (ended) {
    return;
  }
  if (FAILED(l)) return;
  if (p.revents & (POLLERR | POLLHUP)) {
    __atomic_store_n(&l->peer_gone, 1, __ATOMIC_RELEASE);
  } else if ((p.revents & POLLRDHUP) && !l->eof_probed && pthread_mutex_trylock(&l->tx_lock) == 0) {
    l->eof_probed = true;
    send_doorbell_locked(l, fd);
    pthread_mutex_unlock(&l->tx_lock);
  }
}

short r2s__link_poll_ring(r2s_link_t *l, short events)
{
  short rev = 0;
  if ((events & POLLIN) && r2s__readahead_len(&l->rx_ahead)) rev |= POLLIN;
  if ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING &&
      (TP(l)->avail(TPS(l)) != 0 || TP(l)->peer_tx_closed(TPS(l))))
    rev |= POLLIN;
  if ((events & POLLOUT) && r2s__link_tx_in_ring(l) && TP(l)->space(TPS(l)) != 0) rev |= POLLOUT;
  return rev;
}

bool r2s__link_in_rings(r2s_link_t *l, short events)
{
  if ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING) return false;
  return !(events & POLLOUT) || r2s__link_tx_in_ring(l);
}

/* Only waits for the peer's bytes adapt. A writer waits for room when the
 * reader is slower, and its polling would take CPU from that reader. */
static bool rx_spin_adapts(const r2s_link_t *l)
{
  return __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING && TP(l)->adaptive_spin;
}

/* An answer this large is a stream, not a reply: the writer is busy
 * filling the ring and polling would only take CPU from it. */
#define SPIN_STREAM_BYTES (16u << 10)

/* Only a ring can become ready without the kernel: a direction still on
 * the socket (before the switch, on DATA frames, back to plain TCP) is
 * woken by the kernel, and polling the rings for it sees nothing sooner.
 * A wait over such links (iperf3's server in select() over its control
 * connection, never switched, and a data connection gone plain) polled
 * R2SOCK_SPIN_US per wait all the same: twice the receiver's CPU on
 * loopback (iperf3 against a peer with no ring: 88-92 % against 45-49 %). */
int64_t r2s__link_spin_budget(r2s_link_t *l, short events, bool may_probe)
{
  bool rx_ring = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING;
  int64_t rx = (events & POLLIN) && rx_ring ? r2s__spin_budget(&l->rx_spin, rx_spin_adapts(l), may_probe) : 0;
  int64_t tx = (events & POLLOUT) && r2s__link_tx_in_ring(l) ? r2s__spin_budget(&l->tx_spin, false, false) : 0;
  return rx > tx ? rx : tx;
}

bool r2s__link_peer_shares_cpu(r2s_link_t *l)
{
  return TPS(l) && TP(l)->peer_shares_cpu && TP(l)->peer_shares_cpu(TPS(l));
}

/* A reader's wait that ended after waited_ns, the ring then holding
 * `avail` bytes (answered), or not answered. */
static void learn_rx(r2s_link_t *l, int64_t waited_ns, bool answered, ssize_t avail)
{
  bool stream = answered && avail >= (ssize_t)SPIN_STREAM_BYTES;
  r2s__spin_learn_stream(&l->rx_spin, waited_ns, answered, stream);
  r2s__spin_learn(&l->rx_spin, stream ? INT64_MAX : waited_ns, answered);
}

void r2s__link_spin_learn(r2s_link_t *l, short events, int64_t waited_ns, bool answered)
{
  if (!(events & POLLIN) || !rx_spin_adapts(l)) return;
  learn_rx(l, waited_ns, answered, answered ? TP(l)->avail(TPS(l)) : 0);
}

ssize_t r2s__link_send_ring(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, size_t want,
                            r2s_link_moved_t *mv)
{
  ssize_t n = R2S_LINK_SLOW;
  pthread_mutex_lock(&l->tx_lock);
  if (r2s__link_tx_in_ring(l) && !l->tx_pending_len && !l->tx_shut && !FAILED(l)) {
    n = TP(l)->put(TPS(l), iov, cnt, 0, want);
    if (n > 0) {
      mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
      if (TP(l)->take_peer_rx_sleeper(TPS(l))) send_doorbell_locked(l, fd);
    } else {
      n = R2S_LINK_SLOW; /* no room, or a failure: r2s__link_send's to handle */
    }
  }
  pthread_mutex_unlock(&l->tx_lock);
  return n;
}

/* What the ring alone says to a reader: bytes (> 0), something else to
 * read (< 0), nothing (0). Without rx_lock, as r2s__link_poll_ring; the
 * flags that end a read at once (rx_eof, rx_shut) are stored atomically
 * for it, under rx_lock. */
static inline ssize_t look_ring(r2s_link_t *l, const r2s_transport_t *tp, r2s_tp_state_t *tps)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING || r2s__readahead_len(&l->rx_ahead) ||
      FAILED(l) || __atomic_load_n(&l->rx_eof, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&l->rx_shut, __ATOMIC_ACQUIRE))
    return -1;
  ssize_t n = tp->avail(tps);
  if (n > 0) return n;
  return n < 0 || tp->peer_tx_closed(tps) ? -1 : 0;
}

ssize_t r2s__link_await_ring(r2s_link_t *l, bool wait, int64_t *began)
{
  const r2s_transport_t *tp = TP(l);
  r2s_tp_state_t *tps = TPS(l);
  ssize_t n = look_ring(l, tp, tps);
  if (n != 0 || !wait) return n;
  int64_t budget = r2s__link_spin_budget(l, POLLIN, true);
  if (budget <= 0) return 0;
  r2s_spin_pace_t pace;
  r2s__spin_pace_start(&pace, budget, tp->peer_shares_cpu && tp->peer_shares_cpu(tps));
  while (r2s__spin_pace(&pace)) {
    n = look_ring(l, tp, tps);
    if (n != 0) {
      if (rx_spin_adapts(l)) learn_rx(l, r2s__now_ns() - pace.start, true, n);
      return n;
    }
  }
  *began = pace.start;
  return 0;
}

ssize_t r2s__link_recv_ring(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, size_t want,
                            r2s_link_moved_t *mv)
{
  ssize_t n = R2S_LINK_SLOW;
  pthread_mutex_lock(&l->rx_lock);
  if (l->rx_state == R2S_RX_RING && !FAILED(l) && !l->rx_plain_pending && !r2s__readahead_len(&l->rx_ahead)) {
    n = TP(l)->get(TPS(l), iov, cnt, want, false);
    if (n > 0) {
      credit_wakeup(l, fd);
      mv->ring = (size_t)n, mv->ring_path = TP(l)->path;
    } else {
      n = R2S_LINK_SLOW; /* the end, an error, a bad index: r2s__link_recv's to handle */
    }
  }
  pthread_mutex_unlock(&l->rx_lock);
  return n;
}

int64_t r2s__link_nap_ns(r2s_link_t *l, short events, int64_t waited_ns)
{
  if (!(events & POLLIN) || !rx_spin_adapts(l)) return 0;
  return r2s__spin_nap(&l->rx_spin, waited_ns);
}

short r2s__link_arm(r2s_link_t *l, int fd, short events)
{
  short owned, rev = 0;
  r2s__link_pump_due(l); /* a doorbell may come: look at the socket again */
  if ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING)
    TP(l)->sleep_rx(TPS(l), true);
  if ((events & POLLOUT) && r2s__link_tx_in_ring(l)) TP(l)->sleep_tx(TPS(l), true);
  /* Re-check after the flags are visible: a producer that published before
   * seeing them will not ring, so its bytes must be found now. */
  rev = link_poll(l, fd, events, &owned, true);
  return (short)(rev & owned);
}

void r2s__link_unarm(r2s_link_t *l, short events)
{
  if ((events & POLLIN) && TPS(l) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING)
    TP(l)->sleep_rx(TPS(l), false);
  if ((events & POLLOUT) && TPS(l) && __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING)
    TP(l)->sleep_tx(TPS(l), false);
}

ssize_t r2s__link_readable(r2s_link_t *l, int fd)
{
  int q = 0;
  ssize_t n;
  pthread_mutex_lock(&l->rx_lock);
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
  pthread_mutex_unlock(&l->rx_lock);
  return n;
}

/* Before a flush that waits for the peer (transport.h): a peer whose FIN
 * we hold (CLOSE_WAIT) may be a process killed with bytes of ours still in
 * flight, and its device never acknowledges them; a doorbell makes its
 * kernel answer with a reset at once, instead of the flush waiting its
 * whole bound. A live peer that only shut down its side reads the
 * doorbell as nothing. tx_lock held. */
static void flush_tp_locked(r2s_link_t *l, int fd)
{
  if (TP(l)->flush_waits_for_peer) {
    struct tcp_info ti;
    socklen_t n = sizeof ti;
    if (r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) == 0 && ti.tcpi_state == TCP_CLOSE_WAIT)
      send_doorbell_locked(l, fd);
  }
  TP(l)->flush(TPS(l));
}

/* ---- the end ---- */

int r2s__link_shutdown(r2s_link_t *l, int fd, int how)
{
  if (how == SHUT_RD || how == SHUT_RDWR) {
    pthread_mutex_lock(&l->rx_lock);
    __atomic_store_n(&l->rx_shut, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&l->rx_lock);
  }
  if (how == SHUT_WR || how == SHUT_RDWR) {
    pthread_mutex_lock(&l->tx_lock);
    (void)flush_ctrl(l, fd);
    if (l->tx_state == R2S_TX_RING) {
      TP(l)->close_tx(TPS(l));
      flush_tp_locked(l, fd);
      if (TP(l)->take_peer_rx_sleeper(TPS(l))) send_doorbell_locked(l, fd);
    }
    l->tx_shut = true;
    pthread_mutex_unlock(&l->tx_lock);
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
  pthread_mutex_lock(&l->rx_lock);
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
      if (mark_here(fd, &urg) != 1) break;
      if (urg == R2S_SWITCH_BYTE) {
        set_rx(l, R2S_RX_FRAMES);
        continue;
      }
      char c;
      /* Not a switch mark (above): a hello, if the shim's. */
      if (urg >= 0 && note_urgent(l, fd, urg, 1) && k_recv(fd, &c, 1, MSG_PEEK) == -EAGAIN)
        (void)k_recv(fd, NULL, 1, MSG_TRUNC); /* takes the lone hello */
      break;
    }
    if (st == R2S_RX_RING) {
      /* A lie read only now is still a lie: it is reported, and the
       * connection is not given an orderly close. */
      read_control_locked(l, fd, false);
      break;
    }
    if (st != R2S_RX_FRAMES || l->rx_data_left) break;
    r2s_frame_hdr_t h;
    int t = read_frame(l, fd, &h);
    if (t <= 0 || (t == R2S_FRAME_DATA && h.len)) {
      if (t == R2S_FRAME_DATA) l->rx_data_left = h.len;
      break;
    }
    if (t != R2S_FRAME_DATA) {
      /* RING: the frames behind it are read on the next turn. */
      int rc = handle_control(l, fd, &h);
      if (rc < 0 && rc != RETRY) {
        fail(l, rc, "bad frame from the peer");
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
   * ring fail from now on, and bytes of its that the application left
   * unread in the ring make the close a reset. */
  bool ring_unread = false;
  if (used && TPS(l) && !FAILED(l)) {
    ssize_t left = TP(l)->avail(TPS(l));
    size_t one = 1;
    ring_unread = left > 0 && !(l->rx_state == R2S_RX_RING && l->rx_plain_pending && ring_ends_here(l, &one));
    if (TP(l)->close_rx) TP(l)->close_rx(TPS(l));
  }
  bool peer_quiet = (l->rx_state == R2S_RX_PROBE || l->rx_state == R2S_RX_PREMARK) &&
                    __atomic_load_n(&l->tx_plain_bytes, __ATOMIC_RELAXED) + l->rx_consumed <
                        r2s__hello_floor(__atomic_load_n(&l->peer_hello, __ATOMIC_RELAXED));
  pthread_mutex_unlock(&l->rx_lock);
  pthread_mutex_lock(&l->tx_lock);
  (void)flush_ctrl(l, fd);
  /* Our FIN must not overtake our last ring bytes (RDMA writes still in
   * flight): the peer would read the end of the stream before them. */
  if (l->tx_state == R2S_TX_RING) flush_tp_locked(l, fd);
  peer_quiet = peer_quiet && l->tx_state == R2S_TX_PROBE && !l->tp;
  pthread_mutex_unlock(&l->tx_lock);
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

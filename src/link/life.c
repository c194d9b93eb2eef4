/* A link's life: making one for each kind of connection, the state
 * changes every part shares (settling on plain TCP, failing), and what it
 * tells the statistics (path, reason). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "libc.h"
#include "log.h"


#include "rules.h"

unsigned r2s__links_active;
unsigned long r2s__link_activations;

/* Both directions settled on plain TCP: from now on the wrappers skip the
 * link entirely. Not while bytes read ahead wait for the application: the
 * kernel does not have them (r2s__link_recv settles once they are read).
 * None are added once the receive direction is plain. */
void lk_settle_plain(r2s_link_t *l)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_PLAIN &&
      __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_PLAIN && !l->interlude_owed &&
      r2s__readahead_len(&l->rx_ahead) == 0 && !__atomic_load_n(&l->sock_err, __ATOMIC_ACQUIRE) &&
      !__atomic_load_n(&l->backlog_left, __ATOMIC_ACQUIRE) &&
      !__atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) &&
      __atomic_exchange_n(&l->passthrough, 1, __ATOMIC_ACQ_REL) == 0)
    __atomic_fetch_sub(&r2s__links_active, 1, __ATOMIC_RELAXED);
}

/* A protocol error on the receive side (rx_lock held: the frame header in
 * hand is shown). */
void lk_fail(r2s_link_t *l, int err, const char *why)
{
  if (__atomic_exchange_n(&l->failed, -ECONNRESET, __ATOMIC_ACQ_REL) != 0) return;
  lk_activate(l);
  lk_changed(l);
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
void lk_fail_tx(r2s_link_t *l, int err, const char *why)
{
  if (__atomic_exchange_n(&l->failed, -ECONNRESET, __ATOMIC_ACQ_REL) != 0) return;
  lk_activate(l);
  lk_changed(l);
  R2S_STAT_INC(reset_protocol);
  r2s__warn("connection reset: %s (%s; tx state %d)", why, strerror(-err), l->tx_state);
}

/* The application's SO_OOBINLINE, kept aside while the receive direction
 * may still meet the peer's hello or switch mark (read inline, the shim's
 * byte would be data), goes to the kernel once the direction is plain TCP:
 * every urgent byte in front of the reader from then on is the peer
 * application's. rx_lock held (or the link not yet shared). */
void lk_oobinline_to_kernel(r2s_link_t *l, int fd)
{
  if (!__atomic_load_n(&l->app_oobinline, __ATOMIC_ACQUIRE) || l->rx_state != R2S_RX_PLAIN) return;
  int on = 1;
  if (r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on) == 0)
    __atomic_store_n(&l->app_oobinline, false, __ATOMIC_RELEASE);
}

/* The peer turned out to be a plain TCP stack: the receive direction was
 * decided by the caller; the send direction follows if it has not switched. */
void lk_peer_is_plain(r2s_link_t *l, int fd, int reason)
{
  r2s__debug("receive direction is plain TCP (%s)", reason == R2S_REASON_APP_OOB
                                                        ? "the peer's application sent urgent data"
                                                        : "the peer sent no hello");
  if (!l->tcp_reason) l->tcp_reason = reason;
  set_rx(l, R2S_RX_PLAIN);
  lk_oobinline_to_kernel(l, fd);
  if (r2s__trylock(&l->tx_lock) == 0) {
    if (l->tx_state == R2S_TX_PROBE) set_tx(l, R2S_TX_PLAIN);
    lk_tx_unlock(l, fd);
  }
  lk_settle_plain(l);
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
  r2s__shm_peer_may_offer(); /* a peer's ring left behind by its death is ours to remove at exit */
  return l;
}

static r2s_link_t *start_hello(int fd, bool accepted, const r2s_policy_t *policy)
{
  if (policy->upgrade.mode == R2S_UPGRADE_NEVER) return NULL;
  /* The link exists before the hello leaves: a peer that hears it may
   * switch, and then someone must be watching for its mark. */
  r2s_link_t *l = link_new(R2S_RX_PROBE, R2S_TX_PROBE);
  if (!l) return NULL;
  l->policy = *policy;
  const unsigned char hello = lk_hello_byte(l);
  l->peer_shim = r2s__opt.peer_shim;
  if (accepted && !l->peer_shim) {
    l->hello_owed = true;
    return l;
  }
  if (lk_ksend(fd, &hello, 1, MSG_OOB) != 1) {
    r2s__link_free(l);
    return NULL;
  }
  return l;
}

static r2s_link_t *start_inline(int fd)
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

static r2s_link_t *adopt(void)
{
  /* Nothing could have upgraded it: neither the options nor a rule. */
  if (!r2s__upgrades_possible()) return NULL;
  /* The process that made the connection may have read the hello and may
   * have told the peer to switch: watch for the mark for good, and never
   * switch ourselves (its handshake state went with the old image). */
  r2s_link_t *l = link_new(R2S_RX_PREMARK, R2S_TX_PLAIN);
  if (!l) return NULL;
  l->rx_consumed = 1;
  l->tcp_reason = R2S_REASON_INHERITED;
  return l;
}

r2s_link_t *r2s__link_start(int fd, const r2s_link_how_t *how)
{
  r2s_link_t *l;
  switch (how->kind) {
  case R2S_LINK_CONNECTED:
  case R2S_LINK_ACCEPTED:
    l = start_hello(fd, how->kind == R2S_LINK_ACCEPTED, how->policy);
    break;
  case R2S_LINK_OOBINLINE:
    l = start_inline(fd);
    break;
  default:
    l = adopt();
  }
  if (!l) return NULL;
  /* Nobody else sees the link yet. */
  l->inherited = how->inherited;
  l->on_upgrade_arg = how->arg;
  __atomic_store_n(&l->on_upgrade, how->on_upgrade, __ATOMIC_RELEASE);
  return l;
}

bool r2s__link_sandbox(r2s_link_t *l)
{
  /* Another thread inside the link: leave it (and the process to the
   * filter) rather than wait under the caller's locks. */
  if (r2s__trylock(&l->rx_lock) != 0) return false;
  if (r2s__trylock(&l->tx_lock) != 0) {
    lk_rx_unlock(l, -1);
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
    lk_settle_plain(l);
  }
  /* No descriptor here: an owed doorbell or switch waits for the next
   * holder (the sandboxed process's next call on the connection). */
  lk_tx_unlock(l, -1);
  lk_rx_unlock(l, -1);
  return quiet;
}

void r2s__link_free(r2s_link_t *l)
{
  if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (!__atomic_load_n(&l->passthrough, __ATOMIC_ACQUIRE))
    __atomic_fetch_sub(&r2s__links_active, 1, __ATOMIC_RELAXED);
  if (TPS(l)) TP(l)->release(TPS(l));
  if (l->offer_state == R2S_OFFER_MADE && l->offer_st) l->offer_tp->release(l->offer_st); /* never taken */
  free(l->rx_ctrl);
  free(l->backlog);
  r2s__readahead_free(&l->rx_ahead);
  pthread_mutex_destroy(&l->rx_lock);
  pthread_mutex_destroy(&l->tx_lock);
  free(l);
}

static int rx_path(const r2s_link_t *l)
{
  /* Bytes read ahead came over TCP, and the next read takes them. */
  if (r2s__readahead_len(&l->rx_ahead)) return R2S_PATH_TCP;
  return __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING ? TP(l)->path : R2S_PATH_TCP;
}

static int tx_path(const r2s_link_t *l)
{
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING ? TP(l)->path : R2S_PATH_TCP;
}

static int reason(const r2s_link_t *l)
{
  if (__atomic_load_n(&l->upgraded, __ATOMIC_ACQUIRE)) return R2S_REASON_NONE;
  if (FAILED(l)) return R2S_REASON_FAILED;
  if (l->tcp_reason) return l->tcp_reason;
  /* A hello seen where it stood (by a read, or the close) says as much as
   * a probe's. */
  if (!__atomic_load_n(&l->peer_shim, __ATOMIC_ACQUIRE) && !__atomic_load_n(&l->peer_hello, __ATOMIC_RELAXED))
    return R2S_REASON_NO_PEER_YET;
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

void r2s__link_info(const r2s_link_t *l, int *rx, int *tx, int *why)
{
  if (rx) *rx = rx_path(l);
  if (tx) *tx = tx_path(l);
  if (why) *why = reason(l);
}

/* The first direction of the connection entered a ring. */
void lk_mark_upgraded(r2s_link_t *l)
{
  /* Cleared when the reaper takes the link over (r2s__link_close): its
   * connection may be gone by then. */
  void (*cb)(void *, int) = __atomic_load_n(&l->on_upgrade, __ATOMIC_ACQUIRE);
  if (__atomic_exchange_n(&l->upgraded, 1, __ATOMIC_ACQ_REL) == 0 && cb) cb(l->on_upgrade_arg, TP(l)->path);
}

int r2s__link_rx_state(const r2s_link_t *l)
{
  return __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
}

bool r2s__link_wants_lone_marks(const r2s_link_t *l)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_PROBE) return false;
  /* The policy is fixed before the link is shared; the counts are stored
   * atomically for readers without the locks (reason()). */
  if (l->policy.upgrade.mode == R2S_UPGRADE_NOW) return true;
  if (l->policy.upgrade.mode == R2S_UPGRADE_NEVER) return false;
  return __atomic_load_n(&l->tx_plain_bytes, __ATOMIC_RELAXED) + __atomic_load_n(&l->rx_consumed, __ATOMIC_RELAXED) >=
         l->policy.upgrade.after_bytes;
}

uint32_t r2s__link_bells_read(const r2s_link_t *l)
{
  return __atomic_load_n(&l->bells_read, __ATOMIC_RELAXED);
}

void r2s__link_fork_child(r2s_link_t *l)
{
  /* The thread that held a lock at the fork is not in the child, and
   * would never let it go (pthread_atfork(3)). The fields keep what that
   * thread had written up to the fork: an operation it was in the middle
   * of stays as far as it got (README, fork: a connection is used by one
   * process at a time). An offer that such a thread was making is not
   * made here: the next switch makes another. */
  pthread_mutex_init(&l->rx_lock, NULL);
  pthread_mutex_init(&l->tx_lock, NULL);
  if (l->offer_state == R2S_OFFER_MAKING) l->offer_state = R2S_OFFER_NONE;
  /* A failover's resend is the parent's to push (its thread did not
   * come along): sent from here too, the peer would read it twice. */
  if (l->backlog) {
    free(l->backlog);
    l->backlog = NULL, l->backlog_len = l->backlog_off = 0;
    l->backlog_left = 0;
  }
}

pthread_mutex_t *r2s__link_lock(r2s_link_t *l, bool tx)
{
  return tx ? &l->tx_lock : &l->rx_lock;
}

bool r2s__link_active(const r2s_link_t *l)
{
  return __atomic_load_n(&l->activated, __ATOMIC_SEQ_CST) != 0;
}

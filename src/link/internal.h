/*
 * internal.h - the link's own header: its struct and the functions its
 * files share. Only the files in src/link/ include it; everyone else goes through
 * link.h.
 *
 * Contract:
 *  - One concern a file: kernel.c (kernel calls), mark.c (the urgent-mark
 *    channel), life.c (making, settling, failing, statistics), ctrl.c (the
 *    control-frame queue), switch.c (our switch and offer), attach.c (into
 *    the peer's ring), frames.c (the frame reader), recv.c and send.c (the
 *    data path per state), oob.c (urgent data, shadowed TCP options),
 *    ready.c (readiness and waits), close.c (shutdown and close),
 *    failover.c (from the rings back to TCP when their channel fails).
 *  - rx_lock serialises the receive direction, tx_lock the send direction.
 *    Lock order: rx_lock, then tx_lock. A path that holds tx_lock only ever
 *    tries rx_lock (r2s__trylock), or drops tx_lock first. A function
 *    named *_locked expects the lock of its direction held; the comment
 *    above each function says which lock it needs otherwise.
 *  - Neither lock is ever held across a call that can block (a wait for
 *    the peer, the kernel's poll, a sleep, a transport's flush) nor across
 *    the making of a ring (the transport's offer: shm_open and mmap, or
 *    an RDMA device, its thread and registrations): the offer is made
 *    with no lock held (lk_make_offer) and installed under tx_lock, and
 *    waits drop the lock with a state that keeps other senders out
 *    (plain_unsent, tx_shut) and look again once they retake it. Under
 *    the lock only nonblocking system calls are made. Locks are taken
 *    with r2s__lock/r2s__trylock (lockdebug.h), which a debug build
 *    counts; tx_lock is released with lk_tx_unlock (the doorbell a
 *    progress thread could not send, below) and rx_lock with
 *    lk_rx_unlock (the switch a reader could not make under it).
 *  - A transport's progress thread never waits for tx_lock: it tries it,
 *    and if another thread holds it, leaves doorbell_owed for the holder,
 *    which sends the DOORBELL before it lets the lock go.
 *  - After fork() the child re-initialises both locks of every link
 *    (r2s__link_fork_child): a lock that a thread of the parent held is
 *    never released in the child, where that thread does not exist.
 *  - Fields read without their direction's lock (by the other direction,
 *    poll, the statistics) are marked "atomic" and accessed with __atomic
 *    builtins; everything else belongs to the lock of its section.
 *  - Names shared between these files start with lk_; they are not part of
 *    the library's API.
 */
#ifndef R2S_LINK_INTERNAL_H
#define R2S_LINK_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "frame.h"
#include "link.h"
#include "lockdebug.h"
#include "options.h"
#include "path.h"
#include "poke.h"
#include "readahead.h"
#include "spin.h"
#include "stats.h"
#include "transport.h"

typedef enum { R2S_FETCH_NONE, R2S_FETCH_ASKED, R2S_FETCH_DONE } r2s_fetch_state_t;

struct r2s_link_s {
  int passthrough; /* first member (see conn.h): both directions PLAIN */
  int refs;        /* atomic: the connection's, and the reaper's after a close (r2s__link_close) */
  pthread_mutex_t rx_lock, tx_lock;
  int rx_state, tx_state; /* atomic loads on the fast path */
  int peer_shim;          /* the peer announced itself */
  int peer_hello;         /* its hello byte once seen (atomic), else 0 */
  int failed;             /* -errno after a protocol error: the connection is reset */
  int activated;          /* atomic: the link answers for readiness too (lk_activate), once set */
  int sock_err;           /* atomic: the socket's error (a reset) that a call of the shim's took from
                           * the kernel, which reports one once: the application's next call gets it */
  r2s_policy_t policy;    /* when to switch and which transport to offer: the options', or a rule's */

  /* receive side (rx_lock) */
  uint64_t rx_consumed;  /* application bytes taken from TCP before the mark */
  uint32_t rx_data_left; /* bytes left of the current DATA frame */
  uint8_t rx_hdr[R2S_FRAME_HDR_LEN];
  uint32_t rx_hdr_len;
  uint8_t *rx_ctrl; /* payload of the control frame being read */
  uint32_t rx_ctrl_len, rx_ctrl_need;
  /* rx_eof and rx_shut are stored atomically: look_ring (ready.c) reads them without rx_lock */
  bool rx_eof;           /* TCP said end of stream (after the ring drains) */
  int rx_err;            /* ... or this -errno (a reset), reported once */
  bool rx_plain_pending; /* PLAIN received: after rx_plain_at ring bytes, TCP again */
  uint64_t rx_plain_at;
  bool peer_passed_mark;               /* the peer read our handshake (it sent RING or DECLINE) */
  bool app_oob;                        /* the application uses urgent data */
  bool app_oobinline;                  /* atomic: ... inline, and the kernel's flag is ours until PLAIN */
  bool interlude_owed, interlude_sent; /* see send_interlude_locked() */
  bool app_urgent_sent;                /* the application's own urgent byte went out (tx_lock) */
  bool rx_shut;                        /* the application shut down reading */
  bool closing;                        /* the last fd is being closed: no new switch */
  bool reaped;                         /* atomic: the reaper reads it on after the close */
  int pump_due;                        /* atomic: TCP may hold frames for us (see pump_is_due) */
  uint32_t idle_looks;
  int peer_gone;            /* atomic: the peer's socket answered with a reset */
  bool reset_awaited;       /* its close left our bytes unread: its reset was waited for (tx_lock) */
  bool eof_probed;          /* a frame went out to test a peer that sent its FIN */
  int64_t alive_checked_at; /* atomic: r2s__now_ns() of the last check_peer_alive */
  uint32_t bells_read;      /* atomic: DOORBELL frames read, by any thread */
  /* atomic: the waits armed on the link now, receiving [0] and sending
   * [1] (r2s__link_arm to r2s__link_unarm): a thread that takes bytes off
   * the socket or changes the link while one is armed may have taken its
   * wake-up, and pokes (lk_changed, poke.h). */
  int sleepers[2];
  int quiet; /* armed on its own account: state and events (r2s__link_quiet; atomic) */
  int64_t quiet_ended_ns; /* when it last stopped being quiet (atomic) */
  bool have_peer_hs;
  r2s_handshake_t peer_hs;
  bool peer_ready; /* READY received: the peer's end takes our writes */
  /* The peer's ring by descriptor (try_ring_tx): R2S_FETCH_*, atomic
   * (awaits_peer reads it without tx_lock); the outcome once DONE, and
   * attach()'s failure that made us ask, which stands if the fetch fails. */
  int fetch;
  int fetch_rc, attach_rc;
  bool handed;      /* we answered the peer's FETCH (once) */
  bool handed_owed; /* ... and the HANDED frame waits (tx_lock) */
  r2s_handed_t handed_msg;
  /* Application bytes read off the socket by a sender that waited for the
   * peer's control frames behind them; every read takes these first. */
  r2s_readahead_t rx_ahead;

  /* send side (tx_lock) */
  uint64_t tx_writes, tx_probe_at; /* when to look for the peer's hello/handshake next */
  uint64_t tx_plain_bytes;         /* sent over plain TCP before the switch */
  uint64_t tx_probed_bytes;        /* tx_plain_bytes at the last probe for the hello */
  uint64_t tx_frame_bytes;         /* sent in DATA frames since the last probe */
  bool no_ring;                    /* the peer's ring cannot be used: DATA frames for good */
  bool no_offer;                   /* our switch had no ring to offer: the direction is plain */
  int tcp_nodelay, tcp_cork;       /* the application's, kept aside while we send frames */
  int64_t framed_at;               /* when the send direction switched to frames (ns) */
  bool ring_unsent;                /* our RING frame is not all in the kernel: nothing goes into the ring */
  bool plain_unsent;               /* our PLAIN frame is not all in the kernel: no byte goes behind it */
  int plain_reason;                /* why it was sent: r2s_reason_t, for tcp_reason */
  int tcp_reason;                  /* r2s_reason_t once a direction settled on TCP */
  void (*on_upgrade)(void *arg, int path); /* first direction into a ring */
  void *on_upgrade_arg;
  int upgraded;
  uint32_t tx_data_left;   /* payload bytes owed to the DATA frame in flight */
  uint8_t tx_pending[512]; /* control bytes not yet accepted by the kernel */
  uint32_t tx_pending_len;
  bool tx_shut;
  bool tp_connected; /* transport connect() done (or not needed) */
  bool ready_owed;   /* READY still to be sent */
  bool hello_owed;   /* accepted: our hello waits for the peer's (greet_locked) */
  bool inherited;    /* made for a socket inherited across exec untouched: others may hold it */
  bool app_sndbuf;   /* atomic: the application set SO_SNDBUF (here or on its listener) */

  /* the transport both directions use once agreed */
  const r2s_transport_t *tp;
  r2s_tp_state_t *tps;

  r2s_spin_t rx_spin, tx_spin; /* how long waits for our ring / the peer's poll (spin.h) */

  /* Our offer, made with no lock held (lk_make_offer) and taken by
   * lk_switch_tx; tx_lock, except that the maker alone fills it while
   * offer_state is R2S_OFFER_MAKING. */
  int offer_state; /* R2S_OFFER_* */
  int offer_rc;    /* the transport's offer(): 0, or -errno (then no state) */
  const r2s_transport_t *offer_tp;
  r2s_tp_state_t *offer_st;
  r2s_handshake_t offer_hs;
  int switch_owed;   /* atomic: a reader wanted to switch without an offer (lk_rx_unlock makes it) */
  int doorbell_owed; /* atomic: a progress thread found tx_lock taken (lk_transport_wake) */

  /* Failover (failover.c): the channel under the rings failed. */
  int lost;            /* atomic: our rings are stopped (set with both locks held) */
  uint64_t rx_lost_at; /* where our ring ends (both locks to set) */
  bool peer_lost;      /* rx_lock: the peer's FAILOVER came */
  uint64_t rx_skip;    /* rx_lock: resent bytes we had already, to drop after the ring */
  bool failover_owed;  /* tx_lock: our FAILOVER waits for room (or for a DATA frame to end) */
  uint8_t *backlog;    /* tx_lock: bytes of ours the peer may lack, to go behind our FAILOVER */
  size_t backlog_len, backlog_off;
  int backlog_left; /* atomic: backlog not all sent (no passthrough before) */
};

enum { R2S_OFFER_NONE, R2S_OFFER_MAKING, R2S_OFFER_MADE };

_Static_assert(offsetof(r2s_link_t, passthrough) == 0, "link.h and conn.h read the flag at offset 0");

/* Returned inside the link's files when a state changed and the caller should
 * look again; never escapes to the callers of r2s__link_*. */
#define RETRY (-100000)

/* The transport is chosen by the send side (lk_switch_tx, under tx_lock) and
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

/* Every epoll set looks at all its connections at its next wait
 * (r2s__link_activations, epoll_wait.c), and a wait asleep without a
 * slice is poked to: it may have armed no link that would poke it. */
static inline void lk_sets_look_again(void)
{
  __atomic_add_fetch(&r2s__link_activations, 1, __ATOMIC_SEQ_CST);
  r2s__poke_if(1);
}

/* Ends a quiet link's quiet (link.h), at the cost of a load when there is
 * none: for the paths every read or write takes. */
static inline void lk_unquiet(r2s_link_t *l)
{
  if (__atomic_load_n(&l->quiet, __ATOMIC_ACQUIRE)) r2s__link_unquiet(l);
}

/* The link changed, or bytes left its socket, in a way a wait asleep in
 * the kernel on it would not see: such a wait, if one is armed on the
 * link, is woken to look again (poke.h). The wait this thread is arming
 * (r2s__link_arm: lk_arming, counted lk_arming_n times) is not one: it
 * looks after arming. */
static inline void lk_changed(r2s_link_t *l)
{
  lk_unquiet(l);
  extern __thread const r2s_link_t *lk_arming;
  extern __thread int lk_arming_n;
  int n = __atomic_load_n(&l->sleepers[0], __ATOMIC_SEQ_CST) + __atomic_load_n(&l->sleepers[1], __ATOMIC_SEQ_CST);
  r2s__poke_if(l == lk_arming ? n - lk_arming_n : n);
}

/* From the first switch of a direction into frames or a ring, or a
 * failure, the link answers for some readiness the kernel cannot see
 * (ready.c), so the waits of epoll sets must look at it and arm it.
 * Before, the kernel answers for it alone. */
static inline void lk_activate(r2s_link_t *l)
{
  if (__atomic_load_n(&l->activated, __ATOMIC_ACQUIRE) || __atomic_exchange_n(&l->activated, 1, __ATOMIC_SEQ_CST))
    return;
  lk_sets_look_again();
}

/* The end of the stream from TCP; rx_lock held. Stored atomically for
 * look_ring, which reads it without the lock. */
static inline void set_rx_eof(r2s_link_t *l)
{
  __atomic_store_n(&l->rx_eof, true, __ATOMIC_RELEASE);
  lk_changed(l);
}

static inline void set_rx(r2s_link_t *l, int s)
{
  __atomic_store_n(&l->rx_state, s, __ATOMIC_RELEASE);
  if (s == R2S_RX_FRAMES || s == R2S_RX_RING) lk_activate(l);
  lk_changed(l);
}

static inline void set_tx(r2s_link_t *l, int s)
{
  __atomic_store_n(&l->tx_state, s, __ATOMIC_RELEASE);
  if (s == R2S_TX_FRAMES || s == R2S_TX_RING) lk_activate(l);
  lk_changed(l);
}

/* Whether our send direction carries the shim's frames: only then may a
 * DOORBELL or READY go out. Before our switch, and after our PLAIN (the
 * application sent urgent data), it carries the application's bytes, and
 * the peer would read a frame as data. tx_lock held. */
static inline bool carries_frames(const r2s_link_t *l)
{
  return l->tx_state == R2S_TX_FRAMES || l->tx_state == R2S_TX_RING;
}

/* Whether our writes go into the peer's ring now (the send direction owns
 * POLLOUT); read without tx_lock. The RING frame says where the peer's
 * reading continues: until all of it is in the kernel, no byte may go into
 * the ring. Otherwise a FIN (our shutdown or close, with the socket still
 * full of DATA frames the peer had not read) could cut the frame off
 * behind them, and the peer, never told to read its ring, would see the
 * end of the stream with our ring bytes unread: a premature EOF that the
 * 1000-connection test hit under load. */
static inline bool lk_tx_in_ring(const r2s_link_t *l)
{
  /* The same holds for a PLAIN frame (r2s__link_send_oob): the ring ends
   * where it says, so nothing more may go in while it waits; the kernel's
   * POLLOUT says when it can leave. */
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING &&
         !__atomic_load_n(&l->ring_unsent, __ATOMIC_ACQUIRE) &&
         !__atomic_load_n(&l->plain_unsent, __ATOMIC_ACQUIRE) && !__atomic_load_n(&l->lost, __ATOMIC_ACQUIRE);
}

/* kernel.c */
ssize_t lk_ksend(int fd, const void *buf, size_t len, int flags);
ssize_t lk_krecv(int fd, void *buf, size_t len, int flags);
int lk_trim_iov(struct iovec *out, const struct iovec *iov, int cnt, size_t max);
ssize_t lk_krecv_iov(int fd, const struct iovec *iov, int cnt, size_t max, int flags);
void lk_keep_sock_err(r2s_link_t *l, ssize_t n);
ssize_t lk_give_sock_err(r2s_link_t *l, ssize_t n);

/* mark.c */
int lk_urgent_peek(int fd);
int lk_urgent_after_reset(int fd);
int lk_mark_here(int fd, int *urg);
unsigned char lk_hello_byte(const r2s_link_t *l);
bool lk_shim_urgent_here(int fd, int urg, int mark);
bool lk_note_urgent(r2s_link_t *l, int fd, int urg, int mark);

/* life.c */
void lk_settle_plain(r2s_link_t *l);
/* Our send direction, if not yet switched, stays plain for good, for
 * reason (switch.c). tx_lock held. */
void lk_keep_tx_plain_locked(r2s_link_t *l, int fd, r2s_reason_t reason);
void lk_fail(r2s_link_t *l, int err, const char *why);
void lk_fail_tx(r2s_link_t *l, int err, const char *why);
void lk_oobinline_to_kernel(r2s_link_t *l, int fd);
void lk_peer_is_plain(r2s_link_t *l, int fd, int reason);
void lk_mark_upgraded(r2s_link_t *l);

/* ctrl.c */
void lk_tx_unlock(r2s_link_t *l, int fd);
int lk_queue_ctrl(r2s_link_t *l, const void *p, size_t len);
int lk_queue_plain_locked(r2s_link_t *l, int reason);
int lk_queue_last_frame_locked(r2s_link_t *l, int type, int reason, uint64_t at);
int lk_flush_ctrl(r2s_link_t *l, int fd);
void lk_send_doorbell_locked(r2s_link_t *l, int fd);
bool lk_send_decline_locked(r2s_link_t *l, int fd, uint64_t why);
void lk_unframe_declined_locked(r2s_link_t *l, int fd, r2s_reason_t why);
void lk_send_ready_locked(r2s_link_t *l, int fd);
void lk_send_handed_locked(r2s_link_t *l, int fd);
void lk_transport_wake(void *arg, int fd);

/* switch.c */
bool lk_policy_allows_switch(const r2s_link_t *l);
int lk_send_interlude_locked(r2s_link_t *l, int fd);
bool lk_greet_locked(r2s_link_t *l, int fd);
int lk_switch_tx(r2s_link_t *l, int fd);
void lk_make_offer(r2s_link_t *l, int fd);
int lk_switch_from_rx_locked(r2s_link_t *l, int fd);
void lk_rx_unlock(r2s_link_t *l, int fd);
void lk_answer_handshake_locked(r2s_link_t *l, int fd);
void lk_connect_tp_locked(r2s_link_t *l, int fd);

/* attach.c */
bool lk_awaits_peer(const r2s_link_t *l);
void lk_try_ring_tx(r2s_link_t *l, int fd);

/* frames.c */
bool lk_pump_is_due(r2s_link_t *l);
void lk_pump_later(r2s_link_t *l);
int lk_read_frame(r2s_link_t *l, int fd, r2s_frame_hdr_t *h);
int lk_handle_control(r2s_link_t *l, int fd, const r2s_frame_hdr_t *h);
int lk_pump_control(r2s_link_t *l, int fd);
void lk_pump_from_sender(r2s_link_t *l, int fd, bool read_ahead);
void lk_read_control_locked(r2s_link_t *l, int fd, bool read_ahead);

/* failover.c */
static inline bool LOST(const r2s_link_t *l)
{
  return __atomic_load_n(&l->lost, __ATOMIC_ACQUIRE) != 0;
}
bool lk_channel_lost(const r2s_link_t *l);
bool lk_fail_after_due(const r2s_link_t *l);
void lk_lose_locked(r2s_link_t *l, int fd);
void lk_lose(r2s_link_t *l, int fd);
void lk_transport_lost(void *arg, int fd);
int lk_peer_lost_locked(r2s_link_t *l, int fd, uint64_t at);
void lk_failover_owed_locked(r2s_link_t *l, int fd);
bool lk_skip_resent(r2s_link_t *l, int fd);
int lk_flush_backlog_locked(r2s_link_t *l, int fd);
void lk_failover_before_close(r2s_link_t *l, int fd);

/* oob.c */
int lk_atmark(r2s_link_t *l, int fd);

/* recv.c */
ssize_t lk_rx_premark(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags);
bool lk_ring_ends_here(r2s_link_t *l, int fd, size_t *want);

#endif

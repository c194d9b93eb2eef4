/*
 * rdma_conn.h - the RDMA transport's own header: a connection's state, the
 * constants of its use of the queue pair and of the peer's ring, and the
 * functions its files share. Only the transport's own files
 * (src/transport/rdma*.c) include it; the link reaches the transport
 * through transport.h, and the devices are rdma.h's.
 *
 * Contract:
 *  - One concern a file: rdma.c (the design, the progress thread's side,
 *    the drain and the transport's table), rdma_post.c (the send queue:
 *    posting, credits, reports and sleep announcements, and the failure of
 *    the queue pair), rdma_setup.c (offer, connect, attach, and the end of
 *    a state's verbs objects and memory), rdma_producer.c (the writer's
 *    side), rdma_consumer.c (the reader's side and the receive
 *    completions).
 *  - post_lock guards the send queue (slots, signalling, the close owed),
 *    the credits and reports sent, and the producer's count of data
 *    immediates; rx_lock guards the receive completions and what they
 *    carry (the tail, the reposted receives, the sleep announcements
 *    heard). A thread holds at most one of them, so there is no order
 *    between them, and takes no other lock of the shim under either: they
 *    are leaves (an application's thread may hold a link lock when it
 *    takes one; the progress thread holds none). Neither is held across a
 *    wait: the one wait, a flush's for send slots (rd_wait_slots_locked),
 *    lets post_lock go while it sleeps. Both are taken with r2s__lock
 *    (lockdebug.h). A function named *_locked expects the lock its comment
 *    names.
 *  - Each field's comment, or its section's, says how it is shared: under
 *    post_lock or rx_lock, or "atomic" (read outside its lock, always with
 *    __atomic builtins; seq_cst where a store and a load of two threads
 *    pair up, see rd_put). The fields between the application's threads
 *    and the progress thread are atomic throughout. peer_imm,
 *    peer_close_imm and connected are set once, by connect, with a
 *    release store.
 *  - A state made before fork() is foreign() in the child: its verbs
 *    objects and its locks are the parent's (rdma.h).
 *  - Names shared between these files start with rd_; they are hidden like
 *    the rest of the engine and are not part of the library's API.
 */
#ifndef R2S_TRANSPORT_RDMA_CONN_H
#define R2S_TRANSPORT_RDMA_CONN_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../ring.h"
#include "../transport.h"
#include "rdma.h"

#define SQ_DEPTH     256 /* send work requests in flight */
#define RQ_DEPTH     R2S_RDMA_RECVS /* receives posted for the peer's immediates */
#define SIGNAL_EVERY 32  /* at least one send in this many asks for a completion */
#define WANT_INLINE  64  /* bytes a send may carry inside the request */
/* Send slots a data write leaves free for the control writes (credits,
 * reports, sleep announcements, the close): a writer that fills the
 * queue with data still gets its announcement out, and a reader's credit
 * is not held up by the writer of the other direction. */
#define SQ_CTRL_RESERVE 16
/* A writer announces this as the head it saw when its send queue, not
 * the ring, is full: the peer's progress thread rings at once (see
 * rd_sleep_tx). */
#define SLEEP_AT_RING_NOW UINT64_MAX

/* The low bits of an announcement's immediate (with R2S_RDMA_IMM_SLEEP). */
enum { IMM_RX_SLEEP = 1, IMM_TX_SLEEP = 2, IMM_CLOSE = 4 };
/* Receives a producer leaves for its sleep announcements and its close:
 * data writes stop while this few of the peer's are left. */
#define IMM_RESERVE   32u
/* Data writes ask for a solicited completion once this many of the peer's
 * receives may be in use: its progress thread then reposts them and
 * reports, although its reader may not look for a while. */
#define IMM_SOLICIT   (RQ_DEPTH / 2)
/* A consumer reports its reposted receives at least this often. */
#define REPORT_EVERY  32u

/* Offsets in a ring's control page (ring.h), as the peer addresses them. */
#define OFF_TAIL        offsetof(r2s_ring_ctl_t, tail)
#define OFF_PCLOSED     offsetof(r2s_ring_ctl_t, producer_closed)
#define OFF_PSLEEP      offsetof(r2s_ring_ctl_t, producer_sleep_at)
#define OFF_CLINE       offsetof(r2s_ring_ctl_t, head) /* the consumer's line */
#define CLINE_LEN       64u
#define OFF_CSLEEP      (offsetof(r2s_ring_ctl_t, consumer_sleep_at) - OFF_CLINE)
#define OFF_CRECVS      (offsetof(r2s_ring_ctl_t, consumer_recvs) - OFF_CLINE)
/* The peer addresses these: they are protocol (docs/protocol.md). */
_Static_assert(OFF_CLINE == 64 && OFF_CRECVS == 28 && OFF_CRECVS + 4 <= CLINE_LEN, "the RDMA credit line's layout");

struct r2s_tp_state_s {
  r2s_rdma_port_t port;
  unsigned gen; /* r2s__rdma_fork_gen at creation */
  /* This connection's own protection domain: its queue pair can reach
   * only its own regions, and no other connection's peer can name them
   * (an rkey is 8 random bits over a guessable index, and a peer learns
   * the addresses of its own rings). */
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  uint32_t psn, max_inline;

  /* our receive ring: the peer writes its data and producer line; own.size
   * may be less than the ring registered (rdma_fit.h) */
  uint8_t *own_mem;
  size_t own_len;
  struct ibv_mr *own_mr;
  r2s_ring_t own;
  bool wide;          /* holds one of the process's wide rings (offer_size) */
  uint64_t copy_max;  /* our FIT offer: the largest peer ring we copy */
  uint64_t budget_held; /* bytes reserved in the process's budget (rdma_budget.h) */
  uint64_t peer_size; /* the bytes of the peer's ring we use, from connect */

  /* our copy of the peer's ring: its control page exists from the offer
   * (the peer writes its consumer line: credits, sleep, closed), its data
   * from attach, when the peer's ring size is known */
  uint8_t *mctl;
  struct ibv_mr *credit_mr;
  uint8_t *mdata;
  struct ibv_mr *mdata_mr;
  r2s_ring_t peer;

  /* the peer's ring and credit line */
  uint64_t r_ring, r_credit;
  uint32_t r_rkey, r_credit_rkey;
  bool connected, attached;

  /* posting (post_lock): send queue accounting and the credit we sent */
  pthread_mutex_t post_lock;
  unsigned sq_out, unsignalled;
  int sq_full;    /* atomic: a data write found no send slots (space() says 0 until some free) */
  int close_owed; /* post_lock: close_tx found the queue full; the flush posts it */
  uint64_t credit_sent; /* atomic reads outside the lock */
  /* liveness (post_lock, see rd_watch): signalled requests posted and not
   * yet completed, completions taken so far, and the progress thread's
   * watch: the count it last saw and since when (0: not watching) */
  unsigned sig_out;
  uint64_t sq_done, watch_done;
  int64_t watch_since;

  /* data immediates (see the top): peer_imm and peer_close_imm are set
   * by connect, before the peer can write */
  bool peer_imm, peer_close_imm;
  /* producer, post_lock: writes with an immediate posted, and the count
   * of them the peer reported as reposted */
  uint32_t imm_posted, imm_acked;
  int imm_short; /* atomic: the peer may have no receive to spare (space() says 0 until it reports) */
  uint32_t recvs_reported; /* consumer: the last count we reported */
  /* consumer, rx_lock: the receive completions and what they said */
  pthread_mutex_t rx_lock;
  uint64_t imm_tail;     /* the last tail learnt from an immediate */
  uint32_t recvs_done;   /* receives reposted (atomic reads outside) */
  int pending_sleep;     /* IMM_RX_SLEEP | IMM_TX_SLEEP heard, for the progress thread */

  /* between the application's threads and the progress thread */
  uint64_t tx_posted; /* tail of everything posted, seq_cst */
  uint64_t rx_taken;  /* our head after the last get, seq_cst */
  int armed_rx, armed_tx;
  /* -errno once the queue pair failed: -ENOLINK for a channel that failed
   * under a live connection (the link fails over), else -ECONNRESET */
  int broken;
  int stopped;   /* stop() was called: our ring is frozen (ring.h) */
  /* A flushed request, or a post that failed, says the queue pair is in
   * the error state, not why: rd_judge_locked decides from the send
   * queue (atomic) */
  int flush_seen;
  int lost_told; /* the link was told of the loss (conn->lost) */
  void (*lost)(void *, int);

  /* a duplicate of the connection's socket, for the progress thread's
   * doorbells (wake), TCP_INFO and the shutdown on failure; only ever used
   * through rd_own_fd() */
  int dupfd;
  ino_t dup_ino;
  void (*wake)(void *, int);
  void *wake_arg;
};

static inline bool foreign(const r2s_tp_state_t *st)
{
  return st->gen != __atomic_load_n(&r2s__rdma_fork_gen, __ATOMIC_RELAXED);
}

/* Set once by connect, before the peer may write. */
static inline bool peer_imm(const r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->peer_imm, __ATOMIC_ACQUIRE);
}

static inline const r2s_ring_ctl_t *peer_cline(const r2s_tp_state_t *st)
{
  return (const r2s_ring_ctl_t *)st->mctl;
}

static inline int state_error(const r2s_tp_state_t *st)
{
  if (foreign(st)) return -ECONNRESET;
  return __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE);
}

/* What put, space, get and avail say for a failed queue pair: nothing
 * moves (0) on a lost channel, which the link learns from lost() and
 * leaves by failing over; the error otherwise. */
static inline ssize_t rd_stuck(const r2s_tp_state_t *st)
{
  int err = state_error(st);
  return err == -ENOLINK ? 0 : err;
}

/* rdma_post.c */
int rd_own_fd(const r2s_tp_state_t *st);
bool rd_tcp_reset(const r2s_tp_state_t *st);
bool rd_peer_done(const r2s_tp_state_t *st);
void rd_fail_qp(r2s_tp_state_t *st, const char *why);
void rd_lose_qp(r2s_tp_state_t *st, const char *why);
void rd_fail_wc(r2s_tp_state_t *st, int status, bool recv);
void rd_tell_lost(r2s_tp_state_t *st);
void rd_judge_locked(r2s_tp_state_t *st);
void rd_judge(r2s_tp_state_t *st);
void rd_reap_locked(r2s_tp_state_t *st);
void rd_watch(r2s_tp_state_t *st);
int rd_wait_slots_locked(r2s_tp_state_t *st, unsigned need, int64_t deadline, bool soft);
bool rd_sq_room_locked(r2s_tp_state_t *st, unsigned need, unsigned reserve);
int rd_post_locked(r2s_tp_state_t *st, struct ibv_send_wr *wr, unsigned n, bool signal);
void rd_inline_write(struct ibv_send_wr *wr, struct ibv_sge *sge, const void *p, uint32_t len, uint64_t raddr,
                     uint32_t rkey);
int rd_report_locked(r2s_tp_state_t *st, uint32_t min);
int rd_credit_locked(r2s_tp_state_t *st);
int rd_final_credit_locked(r2s_tp_state_t *st);
int rd_announce_locked(r2s_tp_state_t *st, uint64_t value, uint64_t raddr, uint32_t rkey, uint32_t imm);
bool rd_imm_room_locked(r2s_tp_state_t *st);
int rd_post_recvs(r2s_tp_state_t *st, int n);

/* rdma_setup.c */
void rd_destroy(r2s_tp_state_t *st);
void rd_free_state(r2s_tp_state_t *st);
int rd_offer(r2s_tp_state_t **out, r2s_handshake_t *hs, const r2s_tp_conn_t *conn);
int rd_rank(const r2s_tp_conn_t *conn);
bool rd_reaches(const r2s_handshake_t *mine, const r2s_handshake_t *peer);
int rd_check(const r2s_handshake_t *peer);
int rd_connect(r2s_tp_state_t *st, const r2s_handshake_t *peer);
int rd_attach(r2s_tp_state_t *st, const r2s_handshake_t *peer);
void rd_seal(r2s_tp_state_t *st);

/* rdma_producer.c */
ssize_t rd_space(r2s_tp_state_t *st);
ssize_t rd_put(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max);
uint64_t rd_produced(r2s_tp_state_t *st);
bool rd_take_peer_rx_sleeper(r2s_tp_state_t *st);
void rd_sleep_tx(r2s_tp_state_t *st, bool on);
void rd_close_tx(r2s_tp_state_t *st);
int rd_unacked(r2s_tp_state_t *st, uint64_t *from, struct iovec iov[2]);

/* rdma_consumer.c */
void rd_take_recvs_locked(r2s_tp_state_t *st);
ssize_t rd_avail(r2s_tp_state_t *st);
ssize_t rd_get(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek);
uint64_t rd_consumed(r2s_tp_state_t *st);
bool rd_take_peer_tx_sleeper(r2s_tp_state_t *st);
void rd_sleep_rx(r2s_tp_state_t *st, bool on);
bool rd_peer_tx_closed(r2s_tp_state_t *st);
bool rd_lost(r2s_tp_state_t *st);
int rd_stop(r2s_tp_state_t *st, uint64_t *rx_end);

#endif

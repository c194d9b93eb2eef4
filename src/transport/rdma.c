/* The RDMA transport: one RC queue pair per connection. Each end's receive
 * ring (a control page and the data, the layout of ring.h) is registered
 * for remote write; the producer copies the application's bytes into a
 * local copy of the peer's ring, RDMA-writes the new bytes to the same
 * offsets there, then the new tail; the consumer RDMA-writes its head back
 * into the producer's credit word. One copy in, one copy out, as with
 * shared memory.
 *
 * Ordering: the tail is written after the data on the same queue pair,
 * and the consumer reads the tail before the data. That relies on RDMA
 * writes of one RC queue pair being placed in order, which Soft-RoCE and
 * the ConnectX family do (docs/rdma.md).
 *
 * Data immediates (a peer with R2S_CAP_RDMA_IMM): one packet per message
 * instead of two. The last data write carries the new tail's low 31 bits
 * as its immediate and no tail write follows; the consumer learns the
 * tail from its receive completions (take_recvs_locked), taken by whoever
 * polls first, its reader (avail, get) or the progress thread. Each such
 * write uses one of the consumer's R2S_RDMA_RECVS posted receives; the
 * consumer reports how many it reposted (consumer_recvs in the credit
 * line), and a producer that may have used too many falls back to the
 * data write plus the tail write until the reports catch up. So the
 * consumer's tail is the larger of the tail word and the last immediate,
 * both of which only ever grow in the order the producer posted them
 * (raise_tail argues why a late completion cannot lower a tail the word
 * already raised).
 *
 * Sleeping: a consumer about to sleep tells its producer with an RDMA
 * write with immediate (the head it saw), which only the producer's
 * progress thread notices; that thread sends a DOORBELL over TCP at once
 * if bytes were posted beyond that head, or arms the next put to. A
 * producer waiting for room does the same the other way. Both sides then
 * sleep in the kernel on the TCP socket, as with shared memory, so the
 * application's own poll/epoll keep working (transport.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>

#include "../clock.h"
#include "../libc.h"
#include "../lockdebug.h"
#include "../log.h"
#include "../options.h"
#include "../ring.h"
#include "../stats.h"
#include "../transport.h"
#include "rdma.h"
#include "rdma_fit.h"
#include "rdma_imm.h"
#include "rdma_offer.h"

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
 * rdma_sleep_tx). */
#define SLEEP_AT_RING_NOW UINT64_MAX

enum { IMM_RX_SLEEP = 1, IMM_TX_SLEEP = 2 };
/* Receives a producer leaves for its sleep announcements: data writes
 * with an immediate stop while this few of the peer's are left. */
#define IMM_RESERVE   32u
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

  /* data immediates (see the top): peer_imm is set by connect, before
   * the peer can write */
  bool peer_imm;
  /* producer, post_lock: writes with an immediate posted, and the count
   * of them the peer reported as reposted; the tail of the last data
   * immediate (also read by put, which alone writes it) */
  uint32_t imm_posted, imm_acked;
  uint64_t imm_last_tail;
  bool imm_fell_back; /* said so in the debug log */
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
  int broken; /* -errno once the queue pair failed */

  /* a duplicate of the connection's socket, for the progress thread's
   * doorbells (wake), TCP_INFO and the shutdown on failure; only ever used
   * through own_fd() */
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

/* ---- failure ---- */

/* dupfd while it is still the connection's socket, else -1 (libc.h: the
 * application may have taken the number back for a file of its own, which
 * must never get a doorbell, a shutdown or a close from us). */
static int own_fd(const r2s_tp_state_t *st)
{
  return r2s__still_sock(st->dupfd, st->dup_ino) ? st->dupfd : -1;
}

/* The connection's TCP state (TCP_ESTABLISHED...), or -1 if it cannot be
 * had. */
static int tcp_state(const r2s_tp_state_t *st)
{
  struct tcp_info ti;
  socklen_t n = sizeof ti;
  int fd = own_fd(st);
  if (fd < 0 || r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0) return -1;
  return ti.tcpi_state;
}

/* The peer reset the TCP connection (or it was aborted): nothing we
 * posted can reach a reader any more. A connection both ends merely shut
 * down is not CLOSE here (FIN_WAIT, TIME_WAIT, LAST_ACK...), so a peer
 * still reading after its own shutdown is waited for as before. */
static bool tcp_reset(const r2s_tp_state_t *st)
{
  return tcp_state(st) == TCP_CLOSE;
}

/* The peer ended its side: we hold its FIN (or its reset). */
static bool peer_ended(const r2s_tp_state_t *st)
{
  if (__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE)) return true;
  int s = tcp_state(st);
  return s == TCP_CLOSE_WAIT || s == TCP_LAST_ACK || s == TCP_CLOSING || s == TCP_TIME_WAIT || s == TCP_CLOSE;
}

/* Nothing we posted can matter to the peer any more: it ended its side
 * (its FIN is here) and its last credit says it read every byte we wrote.
 * What may still be in flight then is credits and announcements, and the
 * peer may have destroyed its queue pair already: waiting for their
 * acknowledgement would wait out the device's retries (about 0.5 s per
 * close: 25 to 38 of 40 short request/response connections did). */
static bool peer_done(const r2s_tp_state_t *st)
{
  uint64_t written = __atomic_load_n(&st->tx_posted, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&peer_cline(st)->head, __ATOMIC_ACQUIRE) == written && peer_ended(st);
}

/* The queue pair failed: the connection cannot know which bytes arrived,
 * so it ends. The socket is shut down so that both ends' sleepers wake
 * (and find ECONNRESET here, EOF or a reset there). */
static void fail_qp(r2s_tp_state_t *st, const char *why)
{
  if (__atomic_exchange_n(&st->broken, -ECONNRESET, __ATOMIC_ACQ_REL)) return;
  /* A peer that ended its side destroys its queue pair with its close,
   * and a credit or a write of ours still on its way then fails after the
   * retries: the connection's end, which TCP reports as it would, not a
   * fault to warn of (every iperf3 run ended with such warnings). */
  if (peer_ended(st)) {
    r2s__debug("RDMA connection ended after the peer's close (%s)", why);
  } else {
    R2S_STAT_INC(reset_rdma);
    r2s__warn("RDMA connection failed (%s): reset", why);
  }
  int fd = own_fd(st);
  if (fd >= 0) (void)r2s__libc.shutdown(fd, SHUT_RDWR);
}

static inline int state_error(const r2s_tp_state_t *st)
{
  if (foreign(st)) return -ECONNRESET;
  return __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE);
}

/* ---- posting ---- */

/* Takes the send completions there are; post_lock held. */
static void reap_locked(r2s_tp_state_t *st)
{
  struct ibv_wc wc[16];
  int k;
  while ((k = ibv_poll_cq(st->scq, 16, wc)) > 0) {
    for (int i = 0; i < k; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fail_qp(st, R2S_V(ibv_wc_status_str)(wc[i].status));
        continue;
      }
      st->sq_out -= (unsigned)wc[i].wr_id;
    }
  }
  if (k < 0) fail_qp(st, "cannot poll the send queue");
}

/* Waits until `need` send slots are free; post_lock held, and let go
 * while the wait sleeps (the progress thread and the readers' credits
 * must not wait behind it). The NIC frees them within a round trip, or
 * fails the queue pair after its retries; a queue still full at the
 * deadline fails the connection unless `soft` (a close that gives up
 * waiting has nothing left to fail). Only a flush waits (drain): a
 * data or control write that finds the queue full does not (post_locked). */
static int wait_slots_locked(r2s_tp_state_t *st, unsigned need, int64_t deadline, bool soft)
{
  for (unsigned spins = 0;; spins++) {
    reap_locked(st);
    int err = state_error(st);
    if (err) return err;
    if (st->sq_out + need <= SQ_DEPTH) return 0;
    if (soft && peer_done(st)) return 0;
    /* A peer that reset the TCP connection will not answer: a drain
     * (soft) ends, a sender fails the connection, at once. */
    if (spins > 64 && tcp_reset(st)) {
      if (soft) return -ECONNRESET;
      fail_qp(st, "the peer reset the connection");
      return -ECONNRESET;
    }
    if (r2s__now_ns() > deadline) {
      if (soft) return -ETIMEDOUT;
      fail_qp(st, "send queue stuck");
      return -ECONNRESET;
    }
    /* The queue frees within a round trip; past a few polls, let the
     * CPU go (on a small machine the NIC, or Soft-RoCE, needs it). */
    if (spins > 64) {
      struct timespec ts = {0, spins > 1024 ? 200000 : 10000};
      r2s__unlock(&st->post_lock);
      r2s__lock_debug_blocking("nanosleep");
      nanosleep(&ts, NULL);
      r2s__lock(&st->post_lock);
    }
  }
}

/* Are `need` send slots free, beyond `reserve`? Takes the completions
 * there are first. post_lock held. */
static bool sq_room_locked(r2s_tp_state_t *st, unsigned need, unsigned reserve)
{
  if (st->sq_out + need + reserve <= SQ_DEPTH) return true;
  reap_locked(st);
  return st->sq_out + need + reserve <= SQ_DEPTH;
}

/* Posts a chain of n requests; the last asks for a completion when due
 * (its wr_id says how many requests that completion retires). A full
 * queue is -EAGAIN, never a wait (transport.h: put never blocks, and the
 * callers hold locks): the caller tries again later. post_lock held. */
static int post_locked(r2s_tp_state_t *st, struct ibv_send_wr *wr, unsigned n, bool signal)
{
  if (!sq_room_locked(st, n, 0)) {
    int err = state_error(st);
    return err ? err : -EAGAIN;
  }
  for (unsigned i = 0; i + 1 < n; i++) wr[i].next = &wr[i + 1];
  wr[n - 1].next = NULL;
  if (signal || st->unsignalled + n >= SIGNAL_EVERY || st->sq_out + n >= SQ_DEPTH / 2) {
    wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
    wr[n - 1].wr_id = st->unsignalled + n;
    st->unsignalled = 0;
  } else {
    st->unsignalled += n;
  }
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(st->qp, wr, &bad);
  if (rc) {
    fail_qp(st, "cannot post a send");
    return -ECONNRESET;
  }
  st->sq_out += n;
  return 0;
}

/* A small write whose bytes travel inside the request. */
static void inline_write(struct ibv_send_wr *wr, struct ibv_sge *sge, const void *p, uint32_t len, uint64_t raddr,
                         uint32_t rkey)
{
  memset(wr, 0, sizeof *wr);
  *sge = (struct ibv_sge){.addr = (uintptr_t)p, .length = len, .lkey = 0};
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->send_flags = IBV_SEND_INLINE;
  wr->wr.rdma.remote_addr = raddr;
  wr->wr.rdma.rkey = rkey;
}

/* How many receives we reposted into the peer's credit line, once at
 * least `min` are new; post_lock held. */
static int report_locked(r2s_tp_state_t *st, uint32_t min)
{
  uint32_t done = __atomic_load_n(&st->recvs_done, __ATOMIC_ACQUIRE);
  if (!peer_imm(st) || !st->connected || done - st->recvs_reported < min) return 0;
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  inline_write(&wr, &sge, &done, 4, st->r_credit + OFF_CRECVS, st->r_credit_rkey);
  int rc = post_locked(st, &wr, 1, false);
  if (rc == 0) __atomic_store_n(&st->recvs_reported, done, __ATOMIC_RELEASE);
  return rc;
}

/* Head h into the peer's credit word; post_lock held. */
static int write_head_locked(r2s_tp_state_t *st, uint64_t h, bool signal)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  inline_write(&wr, &sge, &h, 8, st->r_credit, st->r_credit_rkey);
  int rc = post_locked(st, &wr, 1, signal);
  if (rc == 0) __atomic_store_n(&st->credit_sent, h, __ATOMIC_RELEASE);
  return rc;
}

/* Our head into the peer's credit word, if it moved; post_lock held. A
 * producer that waits for credits may wait for receives too: the count
 * goes with every credit. */
static int credit_locked(r2s_tp_state_t *st)
{
  uint64_t h = __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST);
  if (h == st->credit_sent || !st->connected) return 0;
  int rc = write_head_locked(st, h, false);
  return rc ? rc : report_locked(st, 1);
}

/* Our head into the peer's credit line, asking for a completion: the last
 * request of a drain (the completion says every earlier one was placed,
 * since one queue pair completes in order) and the final credit a peer
 * that closes after us looks at (peer_done). Rewriting an unchanged head
 * is harmless, and the line is ours to write from connect on; but it is
 * only called when something was posted before or the peer wrote to us,
 * so its queue pair takes writes. The report goes first: nothing may
 * follow the signalled request. post_lock held. */
static int final_credit_locked(r2s_tp_state_t *st)
{
  if (!st->connected) return 0;
  (void)report_locked(st, 1);
  return write_head_locked(st, __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST), true);
}

/* Tells the peer we sleep: value into its word at raddr, with an
 * immediate so its progress thread hears of it (solicited: with data
 * immediates, that thread wakes for nothing else). post_lock held. */
static int announce_locked(r2s_tp_state_t *st, uint64_t value, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  inline_write(&wr, &sge, &value, 8, raddr, rkey);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  if (peer_imm(st)) {
    imm |= R2S_RDMA_IMM_SLEEP;
    wr.send_flags |= IBV_SEND_SOLICITED;
    st->imm_posted++;
  }
  wr.imm_data = htonl(imm);
  int rc = post_locked(st, &wr, 1, false);
  if (rc && peer_imm(st)) st->imm_posted--; /* not posted: no receive of the peer's used */
  return rc;
}

/* May the next data write carry an immediate? Not when the peer may be
 * short of receives: the count it reported is taken only if it moves
 * forward and not past what we posted (a lie then only costs the liar
 * its own throughput, or stalls its queue pair). post_lock held. */
static bool imm_room_locked(r2s_tp_state_t *st)
{
  if (!peer_imm(st)) return false;
  uint32_t r = __atomic_load_n(&peer_cline(st)->consumer_recvs, __ATOMIC_ACQUIRE);
  if (r - st->imm_acked <= st->imm_posted - st->imm_acked) st->imm_acked = r;
  return st->imm_posted - st->imm_acked < RQ_DEPTH - IMM_RESERVE;
}

static int post_recvs(r2s_tp_state_t *st, int n)
{
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    if (ibv_post_recv(st->qp, &wr, &bad)) return -EIO;
  }
  return 0;
}

/* ---- setting up ---- */

static void destroy(r2s_tp_state_t *st)
{
  if (st->qp) (void)R2S_V(ibv_destroy_qp)(st->qp);
  if (st->own_mr) (void)R2S_V(ibv_dereg_mr)(st->own_mr);
  if (st->credit_mr) (void)R2S_V(ibv_dereg_mr)(st->credit_mr);
  if (st->mdata_mr) (void)R2S_V(ibv_dereg_mr)(st->mdata_mr);
  if (st->scq) (void)R2S_V(ibv_destroy_cq)(st->scq);
  if (st->rcq) (void)R2S_V(ibv_destroy_cq)(st->rcq);
  if (st->pd) (void)R2S_V(ibv_dealloc_pd)(st->pd);
}

static unsigned wide_live; /* connections holding a wide ring */

static void free_state(r2s_tp_state_t *st)
{
  if (st->wide) __atomic_sub_fetch(&wide_live, 1, __ATOMIC_RELAXED);
  int fd = own_fd(st);
  if (fd >= 0) r2s__libc.close(fd);
  free(st->own_mem);
  free(st->mctl);
  free(st->mdata);
  pthread_mutex_destroy(&st->post_lock);
  pthread_mutex_destroy(&st->rx_lock);
  free(st);
}

static int to_init(r2s_tp_state_t *st)
{
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = st->port.port,
      /* the peer writes into our ring and credit line; never reads */
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
  };
  return R2S_V(ibv_modify_qp)(st->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int warned_no_resources;

/* This process may pin memory without bound: no memlock limit, or
 * CAP_IPC_LOCK (root), which the kernel's pinning for a registration
 * honours instead of the limit. */
static bool pin_unlimited(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY) return true;
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
  if (syscall(SYS_capget, &h, d) != 0) return false;
  return (d[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1u;
}

/* The ring this connection offers: R2SOCK_RING_SIZE if set; else a wide
 * one while pinned memory is unlimited and the process holds fewer than
 * R2S_RDMA_WIDE_CONNS of them (the bytes in flight of a few fast
 * connections, not a pinned 16 MiB for each of hundreds), else the usual
 * auto size. */
static uint64_t offer_size(bool unlimited, bool *wide)
{
  *wide = false;
  if (r2s__opt.ring_size || !unlimited) return r2s__ring_size(true);
  if (__atomic_add_fetch(&wide_live, 1, __ATOMIC_RELAXED) <= R2S_RDMA_WIDE_CONNS) {
    *wide = true;
    return R2S_RDMA_RING_WIDE;
  }
  __atomic_sub_fetch(&wide_live, 1, __ATOMIC_RELAXED);
  return r2s__ring_size(true);
}

static int rdma_offer(r2s_tp_state_t **out, r2s_handshake_t *hs, const r2s_tp_conn_t *conn)
{
  r2s_rdma_port_t port;
  int rc = r2s__rdma_port_for(&conn->local, &port);
  if (rc < 0) return rc;
  r2s_tp_state_t *st = calloc(1, sizeof *st);
  if (!st) return -ENOMEM;
  pthread_mutex_init(&st->post_lock, NULL);
  pthread_mutex_init(&st->rx_lock, NULL);
  st->port = port;
  st->gen = port.dev->gen;
  st->dupfd = -1;
  bool unlimited = pin_unlimited();
  uint64_t size = offer_size(unlimited, &st->wide);
  st->copy_max = r2s__rdma_copy_max(size, unlimited);
  const char *what = "protection domain";
  struct ibv_pd *pd = st->pd = R2S_V(ibv_alloc_pd)(port.dev->ctx);
  if (!pd) goto err_errno;
  what = "memory";
  rc = -ENOMEM;
  st->own_len = r2s__ring_bytes(size);
  if (posix_memalign((void **)&st->own_mem, 4096, st->own_len) || posix_memalign((void **)&st->mctl, 4096, 4096))
    goto err;
  r2s__ring_format(st->own_mem, size);
  memset(st->mctl, 0, 4096);
  if (r2s__ring_attach(&st->own, st->own_mem, size) < 0) goto err;
  /* The peer may write our ring (data and its producer line) and the
   * consumer line of our copy of its ring: nothing else, and no reads. */
  what = "memory registration (memlock limit? see ulimit -l)";
  st->own_mr = R2S_V(ibv_reg_mr)(pd, st->own_mem, st->own_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  st->credit_mr =
      R2S_V(ibv_reg_mr)(pd, st->mctl + OFF_CLINE, CLINE_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!st->own_mr || !st->credit_mr) goto err_errno;
  what = "completion queues";
  st->scq = R2S_V(ibv_create_cq)(port.dev->ctx, SQ_DEPTH, NULL, NULL, 0);
  st->rcq = R2S_V(ibv_create_cq)(port.dev->ctx, RQ_DEPTH, st, port.dev->chan, 0);
  if (!st->scq || !st->rcq) goto err_errno;
  what = "a queue pair";
  struct ibv_qp_init_attr qa = {
      .send_cq = st->scq,
      .recv_cq = st->rcq,
      .cap = {.max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH, .max_send_sge = 1, .max_recv_sge = 1,
              .max_inline_data = WANT_INLINE},
      .qp_context = st, /* for the asynchronous events (rdma_dev.c) */
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = 0,
  };
  st->qp = R2S_V(ibv_create_qp)(pd, &qa);
  if (!st->qp) goto err_errno;
  st->max_inline = qa.cap.max_inline_data;
  if (st->max_inline < 8) { /* tails and credits must travel inline (see post_data_locked) */
    rc = -EOPNOTSUPP;
    goto err;
  }
  uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (uint32_t)r2s__now_ns();
  st->psn = rnd & 0xffffff;
  if (to_init(st) != 0 || post_recvs(st, RQ_DEPTH) < 0 || ibv_req_notify_cq(st->rcq, 0) != 0) goto err_errno;
  st->dupfd = r2s__libc.fcntl(conn->fd, F_DUPFD_CLOEXEC, 512);
  if (st->dupfd < 0) goto err_errno;
  if (r2s__sock_ino(st->dupfd, &st->dup_ino) < 0) goto err_errno;
  st->wake = conn->wake;
  st->wake_arg = conn->arg;

  r2s_offer_rdma_t o = {
      .qpn = st->qp->qp_num,
      .psn = st->psn,
      .lid = port.lid,
      .mtu = (uint8_t)port.mtu,
      .ring_addr = (uintptr_t)st->own_mem,
      .ring_size = size,
      .ring_rkey = st->own_mr->rkey,
      .credit_addr = (uintptr_t)(st->mctl + OFF_CLINE),
      .credit_rkey = st->credit_mr->rkey,
      .copy_max = st->copy_max,
  };
  memcpy(o.gid, port.gid.raw, 16);
  if ((rc = r2s__rdma_offer_put(hs, &o)) < 0) {
    what = "room in the handshake";
    goto err;
  }
  hs->caps |= R2S_CAP_RDMA_IMM;
  r2s__rdma_track(st, port.dev);
  r2s__debug("RDMA offer: %s port %u gid index %d qpn %u", port.dev->name, port.port, port.gid_index,
             st->qp->qp_num);
  *out = st;
  return 0;

err_errno:
  rc = errno ? -errno : -ENOMEM;
err:
  r2s__rdma_dev_put(port.dev);
  /* Once per process at warning level: a memlock limit hits every
   * connection alike, and the stats count each one. */
  if (__atomic_exchange_n(&warned_no_resources, 1, __ATOMIC_RELAXED) == 0)
    r2s__warn("RDMA: no %s for a connection (%s): such connections stay on TCP", what, strerror(-rc));
  else
    r2s__debug("RDMA: no %s for this connection (%s): it stays on TCP", what, strerror(-rc));
  destroy(st);
  free_state(st);
  return rc;
}

/* Any peer: a device that cannot reach it fails the offer or the connect,
 * and the connection stays on TCP. */
static int rdma_rank(const r2s_tp_conn_t *conn)
{
  (void)conn;
  return 1;
}

static bool rdma_reaches(const r2s_handshake_t *mine, const r2s_handshake_t *peer)
{
  (void)mine;
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(peer, &o) == 1;
}

static int rdma_check(const r2s_handshake_t *peer)
{
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(peer, &o) < 0 ? -EPROTO : 0;
}

static int rdma_connect(r2s_tp_state_t *st, const r2s_handshake_t *peer)
{
  if (foreign(st)) return -ECONNRESET;
  r2s_offer_rdma_t offer;
  const r2s_offer_rdma_t *o = &offer;
  if (r2s__rdma_offer_get(peer, &offer) != 1) return -ENOPROTOOPT;
  if (o->qpn > 0xffffff || o->psn > 0xffffff || o->mtu < IBV_MTU_256 || o->mtu > IBV_MTU_4096 ||
      !r2s__rdma_ring_size_ok(o->ring_size) || (o->copy_max && !r2s__rdma_ring_size_ok(o->copy_max)))
    return -EPROTO;
  /* How much of each ring is used (rdma_fit.h); ours is set before RTR,
   * so before the peer can write into it. */
  uint64_t ring = st->own.size, used = r2s__rdma_own_used(ring, o->copy_max);
  uint64_t peer_size = r2s__rdma_peer_used(o->ring_size, o->copy_max != 0, ring, st->copy_max);
  if (!peer_size) {
    r2s__warn("the peer's RDMA ring (%llu bytes) is larger than this end accepts (R2SOCK_RING_SIZE or 16M): "
              "staying on TCP",
              (unsigned long long)o->ring_size);
    return -ENOBUFS;
  }
  if (used < ring && r2s__ring_narrow(&st->own, used) < 0) return -EPROTO;
  st->peer_size = peer_size;
  r2s__debug("RDMA rings: ours %llu of %llu bytes, the peer's %llu of %llu", (unsigned long long)st->own.size,
             (unsigned long long)ring, (unsigned long long)peer_size, (unsigned long long)o->ring_size);
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = o->mtu < st->port.mtu ? (enum ibv_mtu)o->mtu : st->port.mtu,
      .dest_qp_num = o->qpn,
      .rq_psn = o->psn,
      .max_dest_rd_atomic = 0, /* no remote reads of ours, ever */
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = o->lid, .sl = 0, .src_path_bits = 0, .port_num = st->port.port},
  };
  if (st->port.roce) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, o->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)st->port.gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  /* Before RTR: the peer's first write may be one with a data immediate. */
  __atomic_store_n(&st->peer_imm, (peer->caps & R2S_CAP_RDMA_IMM) != 0, __ATOMIC_RELEASE);
  if (R2S_V(ibv_modify_qp)(st->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return errno ? -errno : -EIO;
  struct ibv_qp_attr r = {
      .qp_state = IBV_QPS_RTS,
      .sq_psn = st->psn,
      /* A peer that is gone fails the queue pair after 7 tries of 67 ms
       * (4.096 us * 2^14), about 0.5 s. Not retry_cnt 7, the usual value:
       * Soft-RoCE takes 7 to mean "retry forever" (rxe_comp.c), and a
       * sender toward a killed peer then waited out its whole bound. */
      .timeout = 14,
      .retry_cnt = 6,
      /* A peer that lives but has no receive posted yet is waited for, as
       * TCP waits for a closed window. */
      .rnr_retry = 7,
      .max_rd_atomic = 0,
  };
  if (R2S_V(ibv_modify_qp)(st->qp, &r,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return errno ? -errno : -EIO;
  st->r_ring = o->ring_addr;
  st->r_rkey = o->ring_rkey;
  st->r_credit = o->credit_addr;
  st->r_credit_rkey = o->credit_rkey;
  r2s__lock(&st->post_lock);
  __atomic_store_n(&st->connected, true, __ATOMIC_RELEASE);
  r2s__unlock(&st->post_lock);
  return 0;
}

static int rdma_attach(r2s_tp_state_t *st, const r2s_handshake_t *peer)
{
  if (!st->connected) return -ENOTCONN;
  (void)peer;
  uint64_t size = st->peer_size; /* fitted by connect */
  if (posix_memalign((void **)&st->mdata, 4096, size)) return -ENOMEM;
  st->mdata_mr = R2S_V(ibv_reg_mr)(st->pd, st->mdata, size, IBV_ACCESS_LOCAL_WRITE);
  if (!st->mdata_mr) {
    int rc = errno ? -errno : -ENOMEM;
    free(st->mdata);
    st->mdata = NULL;
    return rc;
  }
  if (r2s__ring_attach_split(&st->peer, st->mctl, st->mdata, size) < 0) return -EPROTO;
  st->attached = true;
  return 0;
}

static void rdma_seal(r2s_tp_state_t *st)
{
  (void)st; /* nothing is named: the rkeys are in this connection's TCP stream only */
}

/* ---- producer ---- */

/* How far a producer at `from` may write: without receives to spare at
 * the peer, no further than R2S_IMM_SPAN past its last immediate
 * (post_data_locked may then overdraw the reserve by one). Only the
 * producer's own thread moves imm_last_tail. */
static uint64_t imm_span_left(r2s_tp_state_t *st, uint64_t from)
{
  uint64_t left = r2s__imm_span_left(st->imm_last_tail, from);
  if (left >= st->peer.size) return UINT64_MAX; /* far from it: no need to look */
  r2s__lock(&st->post_lock);
  bool room = imm_room_locked(st);
  r2s__unlock(&st->post_lock);
  return room ? UINT64_MAX : left;
}

/* The send queue had no slots for a data write (sq_full): are there now?
 * Clears the flag once there are. */
static bool sq_freed(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->sq_full, __ATOMIC_SEQ_CST)) return true;
  r2s__lock(&st->post_lock);
  bool room = sq_room_locked(st, 3, SQ_CTRL_RESERVE);
  if (room) __atomic_store_n(&st->sq_full, 0, __ATOMIC_SEQ_CST);
  r2s__unlock(&st->post_lock);
  return room;
}

static ssize_t rdma_space(r2s_tp_state_t *st)
{
  int err = state_error(st);
  if (err) return err;
  if (__atomic_load_n(&peer_cline(st)->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  /* A full send queue is a full ring to the writer: it waits (and is
   * woken) the same way (rdma_sleep_tx). */
  if (!sq_freed(st)) return 0;
  ssize_t n = r2s__ring_space(&st->peer);
  if (n <= 0 || !peer_imm(st)) return n;
  uint64_t left = imm_span_left(st, st->peer.tail);
  return left < (uint64_t)n ? (ssize_t)left : n;
}

/* RDMA-writes ring bytes [from, to) of our copy to the same offsets of the
 * peer's ring, the last write carrying the new tail as its immediate if
 * the peer has receives to spare (or must have one, see rdma_imm.h), else
 * followed by a write of the tail; post_lock held. */
static int post_data_locked(r2s_tp_state_t *st, uint64_t from, uint64_t to)
{
  struct ibv_send_wr wr[3];
  struct ibv_sge sge[3];
  unsigned k = 0;
  if (!sq_room_locked(st, 3, SQ_CTRL_RESERVE)) {
    __atomic_store_n(&st->sq_full, 1, __ATOMIC_SEQ_CST);
    int err = state_error(st);
    return err ? err : -EAGAIN;
  }
  for (uint64_t pos = from; pos < to; k++) {
    uint64_t off = pos & st->peer.mask, len = to - pos;
    if (len > st->peer.size - off) len = st->peer.size - off;
    memset(&wr[k], 0, sizeof wr[k]);
    sge[k] = (struct ibv_sge){.addr = (uintptr_t)(st->mdata + off), .length = (uint32_t)len,
                              .lkey = st->mdata_mr->lkey};
    wr[k].opcode = IBV_WR_RDMA_WRITE;
    wr[k].sg_list = &sge[k];
    wr[k].num_sge = 1;
    wr[k].send_flags = len <= st->max_inline ? IBV_SEND_INLINE : 0;
    wr[k].wr.rdma.remote_addr = st->r_ring + R2S_RING_CTL_SIZE + off;
    wr[k].wr.rdma.rkey = st->r_rkey;
    pos += len;
  }
  if (peer_imm(st) && (imm_room_locked(st) || to - st->imm_last_tail > R2S_IMM_SPAN)) {
    wr[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[k - 1].imm_data = htonl(r2s__imm_of_tail(to));
    st->imm_posted++;
    st->imm_last_tail = to;
    return post_locked(st, wr, k, false);
  }
  if (peer_imm(st) && !st->imm_fell_back) { /* once: a stream of small writes outran the peer's reports */
    st->imm_fell_back = true;
    r2s__debug("RDMA: the peer may be short of receives (%u of %u in use): tail words until it reports",
               st->imm_posted - st->imm_acked, RQ_DEPTH);
  }
  /* Inline, so the value is taken now: a later put must not change the
   * tail this request carries before its data is written. */
  uint64_t tail = to;
  inline_write(&wr[k], &sge[k], &tail, 8, st->r_ring + OFF_TAIL, st->r_rkey);
  return post_locked(st, wr, k + 1, false);
}

static ssize_t rdma_put(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max)
{
  int err = state_error(st);
  if (err) return err;
  if (__atomic_load_n(&peer_cline(st)->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  uint64_t from = st->peer.tail;
  if (peer_imm(st)) {
    uint64_t left = imm_span_left(st, from);
    if (left < max) max = (size_t)left;
    if (max == 0) return 0;
  }
  if (!sq_freed(st)) return 0;
  ssize_t n = r2s__ring_put(&st->peer, iov, cnt, skip, max);
  if (n <= 0) return n;
  r2s__lock(&st->post_lock);
  int rc = post_data_locked(st, from, st->peer.tail);
  r2s__unlock(&st->post_lock);
  if (rc == -EAGAIN) {
    /* No send slots after all (control writes took them): the bytes are
     * taken back from our copy, which nobody else reads, and the caller
     * hears of a full ring (0). */
    st->peer.tail = from;
    __atomic_store_n(&st->peer.ctl->tail, from, __ATOMIC_SEQ_CST);
    return 0;
  }
  if (rc < 0) return rc;
  /* Before the caller looks at armed_rx (take_peer_rx_sleeper): the
   * progress thread arms, then reads this (Dekker, within the process). */
  __atomic_store_n(&st->tx_posted, st->peer.tail, __ATOMIC_SEQ_CST);
  return n;
}

static uint64_t rdma_produced(r2s_tp_state_t *st)
{
  return st->attached ? st->peer.tail : 0;
}

static bool rdma_take_peer_rx_sleeper(r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->armed_rx, __ATOMIC_SEQ_CST) && __atomic_exchange_n(&st->armed_rx, 0, __ATOMIC_SEQ_CST);
}

/* A writer about to sleep tells the peer the head it saw; the peer's
 * progress thread rings once it has sent a credit beyond it. A writer
 * whose send queue is full (sq_full) waits for the device, not for the
 * peer's reader, and nothing of ours can wake it (it sleeps on the TCP
 * socket, which only the peer can make readable): it asks the peer to
 * ring at once (SLEEP_AT_RING_NOW). The announcement goes behind every
 * write of ours in the queue, so by the time the peer hears it, it has
 * acknowledged them all and our slots are free or about to be; a writer
 * that still finds none announces again. */
static void rdma_sleep_tx(r2s_tp_state_t *st, bool on)
{
  if (!on || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  uint64_t seen = __atomic_load_n(&st->sq_full, __ATOMIC_SEQ_CST)
                      ? SLEEP_AT_RING_NOW
                      : __atomic_load_n(&peer_cline(st)->head, __ATOMIC_ACQUIRE);
  r2s__lock(&st->post_lock);
  (void)announce_locked(st, seen, st->r_ring + OFF_PSLEEP, st->r_rkey, IMM_TX_SLEEP);
  r2s__unlock(&st->post_lock);
}

static void rdma_close_tx(r2s_tp_state_t *st)
{
  if (!st->attached || state_error(st)) return;
  static const uint32_t one = 1;
  /* With data immediates the tail word goes first: a reader that sees
   * producer_closed must find every byte without waiting for a receive
   * completion (one the device has not yet produced would read as EOF). */
  uint64_t tail = st->peer.tail;
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  unsigned n = 0;
  if (peer_imm(st)) inline_write(&wr[n], &sge[n], &tail, 8, st->r_ring + OFF_TAIL, st->r_rkey), n++;
  inline_write(&wr[n], &sge[n], &one, 4, st->r_ring + OFF_PCLOSED, st->r_rkey), n++;
  r2s__lock(&st->post_lock);
  /* A full queue: the flush, which waits for slots, posts it. */
  if (post_locked(st, wr, n, false) == -EAGAIN) st->close_owed = 1;
  r2s__unlock(&st->post_lock);
}

/* ---- consumer ---- */

/* Raises our ring's tail word to t, unless the peer's tail write already
 * raised it further. Why a CAS-max on a word the peer writes is safe:
 * both the tail words and the immediates the producer posts grow in
 * posting order, and one RC queue pair places its writes in that order;
 * the completion of a write with immediate comes after the write (and
 * every write posted before it) was placed. So when we raise the word to
 * an immediate's tail, every tail write posted before that immediate has
 * landed, and any tail write still to land was posted after it and
 * carries at least as much. A hostile word or immediate is no worse than
 * a hostile tail write: ring.c checks the word before every use. */
static void raise_tail(r2s_tp_state_t *st, uint64_t t)
{
  uint64_t cur = __atomic_load_n(&st->own.ctl->tail, __ATOMIC_ACQUIRE);
  while (cur < t &&
         !__atomic_compare_exchange_n(&st->own.ctl->tail, &cur, t, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
  }
}

/* Takes the receive completions there are and reposts their receives;
 * rx_lock held. A data immediate moves the tail forward: its 31 bits are
 * rebuilt from the last immediate's tail, which lies less than 2^31
 * behind (rdma_imm.h); sleep announcements are left in pending_sleep for
 * the progress thread, which is woken for them (solicited) even when a
 * reader took them first. */
static void take_recvs_locked(r2s_tp_state_t *st)
{
  struct ibv_wc wc[16];
  int k, used = 0;
  bool raise = false;
  while ((k = ibv_poll_cq(st->rcq, 16, wc)) > 0) {
    for (int i = 0; i < k; i++) {
      used++;
      if (wc[i].status != IBV_WC_SUCCESS) {
        fail_qp(st, R2S_V(ibv_wc_status_str)(wc[i].status));
        continue;
      }
      if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;
      uint32_t imm = ntohl(wc[i].imm_data);
      if (!peer_imm(st)) { /* the announcements of a peer without data immediates */
        st->pending_sleep |= imm == IMM_RX_SLEEP ? IMM_RX_SLEEP : imm == IMM_TX_SLEEP ? IMM_TX_SLEEP : 0;
      } else if (imm & R2S_RDMA_IMM_SLEEP) {
        st->pending_sleep |= (int)(imm & (IMM_RX_SLEEP | IMM_TX_SLEEP));
      } else {
        st->imm_tail = r2s__imm_tail_after(st->imm_tail, imm);
        raise = true;
      }
    }
  }
  if (k < 0) fail_qp(st, "cannot poll the receive queue");
  if (raise) raise_tail(st, st->imm_tail);
  if (used && !state_error(st)) {
    if (post_recvs(st, used) < 0)
      fail_qp(st, "cannot post receives");
    else
      __atomic_store_n(&st->recvs_done, st->recvs_done + (uint32_t)used, __ATOMIC_RELEASE);
  }
}

/* The reader's look at its receive completions, before it reads the tail:
 * with data immediates, nothing else tells it of new bytes. */
static void poll_recvs(r2s_tp_state_t *st)
{
  if (!peer_imm(st)) return;
  r2s__lock(&st->rx_lock);
  take_recvs_locked(st);
  r2s__unlock(&st->rx_lock);
  if (__atomic_load_n(&st->recvs_done, __ATOMIC_ACQUIRE) - __atomic_load_n(&st->recvs_reported, __ATOMIC_ACQUIRE) >=
      REPORT_EVERY) {
    r2s__lock(&st->post_lock);
    (void)report_locked(st, REPORT_EVERY);
    r2s__unlock(&st->post_lock);
  }
}

static ssize_t rdma_avail(r2s_tp_state_t *st)
{
  if (foreign(st)) return -ECONNRESET;
  poll_recvs(st);
  ssize_t n = r2s__ring_avail(&st->own);
  if (n == 0 && !__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE))
    return __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE);
  return n;
}

static ssize_t rdma_get(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek)
{
  if (foreign(st)) return -ECONNRESET;
  poll_recvs(st);
  ssize_t n = r2s__ring_get(&st->own, iov, cnt, max, peek);
  if (n > 0 && !peek) {
    __atomic_store_n(&st->rx_taken, st->own.head, __ATOMIC_SEQ_CST);
    /* Credits in batches of a quarter ring: a producer with room left
     * does not need them sooner, one that waits asks (IMM_TX_SLEEP). */
    if (st->own.head - __atomic_load_n(&st->credit_sent, __ATOMIC_ACQUIRE) >= st->own.size / 4) {
      r2s__lock(&st->post_lock);
      (void)credit_locked(st);
      r2s__unlock(&st->post_lock);
    }
  }
  if (n == 0 && !__atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE))
    return __atomic_load_n(&st->broken, __ATOMIC_ACQUIRE);
  return n;
}

static uint64_t rdma_consumed(r2s_tp_state_t *st)
{
  return st->own.head;
}

static bool rdma_take_peer_tx_sleeper(r2s_tp_state_t *st)
{
  if (!__atomic_load_n(&st->armed_tx, __ATOMIC_SEQ_CST) || !__atomic_exchange_n(&st->armed_tx, 0, __ATOMIC_SEQ_CST))
    return false;
  /* The doorbell must find the credit there, or follow it closely. */
  r2s__lock(&st->post_lock);
  (void)credit_locked(st);
  r2s__unlock(&st->post_lock);
  return true;
}

static void rdma_sleep_rx(r2s_tp_state_t *st, bool on)
{
  if (!on || state_error(st) || !__atomic_load_n(&st->connected, __ATOMIC_ACQUIRE)) return;
  r2s__lock(&st->post_lock);
  (void)credit_locked(st);
  (void)announce_locked(st, __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST), st->r_credit + OFF_CSLEEP, st->r_credit_rkey, IMM_RX_SLEEP);
  r2s__unlock(&st->post_lock);
}

static bool rdma_peer_tx_closed(r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE) != 0;
}

/* ---- the progress thread's side ---- */

void r2s__rdma_on_fatal(r2s_tp_state_t *st, const char *why)
{
  if (!foreign(st)) fail_qp(st, why);
}

void r2s__rdma_on_event(r2s_tp_state_t *st)
{
  if (foreign(st)) return;
  /* Re-armed before polling: a completion after the poll then raises a
   * new event instead of waiting unseen. With data immediates only the
   * solicited ones (sleep announcements) and errors raise one. A reader
   * that took an announcement's completion first left it in
   * pending_sleep under rx_lock: either before we take the lock (we find
   * it), or the completion was still in the queue when we polled (we
   * take it ourselves). */
  (void)ibv_req_notify_cq(st->rcq, peer_imm(st) ? 1 : 0);
  r2s__lock(&st->rx_lock);
  take_recvs_locked(st);
  int pending = st->pending_sleep;
  st->pending_sleep = 0;
  r2s__unlock(&st->rx_lock);
  if (state_error(st)) return;
  bool rx = pending & IMM_RX_SLEEP, tx = pending & IMM_TX_SLEEP;
  /* The doorbells below go through our duplicate of the socket. Without it
   * (the application took its number, own_fd) the flags stay set for the
   * application's threads: their next write or read of this connection
   * rings through the application's own descriptor, and until then a
   * sleeper's wait ends by its slice (100 ms) at the latest. */
  int fd;
  /* A producer that waits may wait for receives: it gets the count now. */
  r2s__lock(&st->post_lock);
  (void)report_locked(st, tx ? 1 : REPORT_EVERY);
  r2s__unlock(&st->post_lock);
  if (rx) { /* the peer's reader sleeps: does it know of all we posted? */
    __atomic_store_n(&st->armed_rx, 1, __ATOMIC_SEQ_CST);
    uint64_t seen = __atomic_load_n(&peer_cline(st)->consumer_sleep_at, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&st->tx_posted, __ATOMIC_SEQ_CST) > seen && (fd = own_fd(st)) >= 0 &&
        rdma_take_peer_rx_sleeper(st))
      st->wake(st->wake_arg, fd);
  }
  if (tx) { /* the peer's writer waits for room: did we free some it has not seen? */
    __atomic_store_n(&st->armed_tx, 1, __ATOMIC_SEQ_CST);
    uint64_t seen = __atomic_load_n(&st->own.ctl->producer_sleep_at, __ATOMIC_ACQUIRE);
    r2s__lock(&st->post_lock);
    (void)credit_locked(st);
    bool ring = __atomic_load_n(&st->credit_sent, __ATOMIC_ACQUIRE) > seen || seen == SLEEP_AT_RING_NOW;
    r2s__unlock(&st->post_lock);
    if (ring && (fd = own_fd(st)) >= 0 && __atomic_exchange_n(&st->armed_tx, 0, __ATOMIC_SEQ_CST))
      st->wake(st->wake_arg, fd);
  }
}

/* Waits until everything posted has left (the last request asks for a
 * completion so that the wait can end). Not for a peer that is gone: a
 * killed peer's queue pair never answers, and close() then exit() each
 * waited their whole bound for it (survivors of rxe.faults' kills ended
 * 1.6 to 4 s after the kill, where a survivor should end within 1 s). Nor for
 * a peer that is done (peer_done). The wait ends on the completion of our
 * final credit (final_credit_locked), which also tells a peer closing
 * after us that we are done. */
void r2s__rdma_drain(r2s_tp_state_t *st, uint64_t deadline_ns)
{
  if (foreign(st) || tcp_reset(st)) return;
  r2s__lock(&st->post_lock);
  reap_locked(st);
  if (peer_done(st)) {
    r2s__unlock(&st->post_lock);
    return;
  }
  if (st->close_owed && !state_error(st) && wait_slots_locked(st, 2, (int64_t)deadline_ns, true) == 0) {
    st->close_owed = 0;
    r2s__unlock(&st->post_lock);
    rdma_close_tx(st);
    r2s__lock(&st->post_lock);
  }
  if (!state_error(st) && (st->sq_out || __atomic_load_n(&st->rx_taken, __ATOMIC_SEQ_CST) != st->credit_sent))
    (void)final_credit_locked(st);
  /* Counted: each one is a close that waited for the device's retries
   * (about 0.5 s) or its bound, or found the peer reset. */
  if (st->sq_out && !state_error(st) && wait_slots_locked(st, SQ_DEPTH, (int64_t)deadline_ns, true) != 0)
    R2S_STAT_INC(rdma_drain_failed);
  r2s__unlock(&st->post_lock);
}

void r2s__rdma_exit(int ms)
{
  /* Only a process that made an RDMA offer has anything to drain; the
   * others (nearly all) must not load libibverbs just to exit. */
  if (!r2s__verbs_loaded()) return;
  r2s__rdma_for_each(r2s__rdma_drain, (uint64_t)r2s__now_ns() + (uint64_t)ms * 1000000u);
}

static void rdma_flush(r2s_tp_state_t *st)
{
  r2s__rdma_drain(st, (uint64_t)r2s__now_ns() + 1000000000u);
}

static void rdma_release(r2s_tp_state_t *st)
{
  if (!foreign(st)) {
    /* Bytes the application handed us before close() still go out, as
     * the kernel would send them for TCP. */
    rdma_flush(st);
    r2s__rdma_untrack(st);
    destroy(st);
    r2s__rdma_dev_put(st->port.dev);
  }
  /* In a fork child the verbs objects are the parent's: only our copies
   * of the memory go. */
  free_state(st);
}

const r2s_transport_t r2s__transport_rdma = {
    .name = "rdma",
    .path = R2S_PATH_RDMA,
    .needs_ready = true,
    .adaptive_spin = true,
    .flush_waits_for_peer = true,
    .rank = rdma_rank,
    .offer = rdma_offer,
    .connect = rdma_connect,
    .check = rdma_check,
    .reaches = rdma_reaches,
    .attach = rdma_attach,
    .seal = rdma_seal,
    .space = rdma_space,
    .put = rdma_put,
    .avail = rdma_avail,
    .get = rdma_get,
    .produced = rdma_produced,
    .consumed = rdma_consumed,
    .sleep_rx = rdma_sleep_rx,
    .sleep_tx = rdma_sleep_tx,
    .take_peer_rx_sleeper = rdma_take_peer_rx_sleeper,
    .take_peer_tx_sleeper = rdma_take_peer_tx_sleeper,
    .peer_tx_closed = rdma_peer_tx_closed,
    .close_tx = rdma_close_tx,
    .flush = rdma_flush,
    .release = rdma_release,
};

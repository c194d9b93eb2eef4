/* Setting up an RDMA connection and taking it down: the offer (its
 * protection domain, registered rings, completion queues and queue pair,
 * and the ring size it offers), the checks of the peer's offer, the
 * queue pair brought to RTS by connect, the copy of the peer's ring made
 * by attach; and the end of a state's verbs objects and memory
 * (rdma_conn.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../clock.h"
#include "../libc.h"
#include "../lockdebug.h"
#include "../log.h"
#include "../options.h"
#include "../stats.h"
#include "rdma_budget.h"
#include "rdma_conn.h"
#include "rdma_fit.h"
#include "rdma_offer.h"

void rd_destroy(r2s_tp_state_t *st)
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

/* The process's share this state holds: its budget reservation (none in
 * a fork child, whose budget started empty) and a wide ring's slot. */
static void give_back(r2s_tp_state_t *st)
{
  if (!foreign(st)) r2s__rdma_budget_give(st->budget_held);
  st->budget_held = 0;
  if (st->wide) r2s__tp_slot_give(&wide_live);
  st->wide = false;
}

void rd_free_state(r2s_tp_state_t *st)
{
  give_back(st);
  int fd = rd_own_fd(st);
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

static int warned_no_resources, warned_no_budget;

/* The ring this connection offers and the largest peer ring it copies,
 * reserved in the process's budget (rdma_budget.h). R2SOCK_RING_SIZE if
 * set, as it is or not at all. Else a wide ring while pinned memory is
 * unlimited and the process holds fewer than R2S_RDMA_WIDE_CONNS of them
 * (the bytes in flight of a few fast connections, not a pinned 16 MiB
 * for each of hundreds), else the usual auto size; either halved until
 * it fits what the budget has left, and a peer ring copied up to the
 * same size. -ENOBUFS: no room. */
static int offer_size(r2s_tp_state_t *st, bool unlimited, uint64_t *size)
{
  if (r2s__opt.ring_size) {
    uint64_t copy = r2s__rdma_copy_max(r2s__opt.ring_size, unlimited);
    uint64_t cost = r2s__rdma_conn_cost(r2s__opt.ring_size, copy);
    if (!r2s__rdma_budget_take(cost)) return -ENOBUFS;
    *size = r2s__opt.ring_size, st->copy_max = copy, st->budget_held = cost;
    return 0;
  }
  st->wide = unlimited && r2s__tp_slot_take(&wide_live, R2S_RDMA_WIDE_CONNS);
  uint64_t want = st->wide ? R2S_RDMA_RING_WIDE : r2s__ring_size(true), s;
  do {
    s = r2s__rdma_ring_in_budget(want, R2S_RDMA_RING_LEAST, r2s__rdma_budget_room());
  } while (s && !r2s__rdma_budget_take(r2s__rdma_conn_cost(s, s)));
  if (st->wide && s != R2S_RDMA_RING_WIDE) {
    r2s__tp_slot_give(&wide_live);
    st->wide = false;
  }
  if (!s) return -ENOBUFS;
  if (s < r2s__ring_size(true)) R2S_STAT_INC(rdma_rings_small);
  *size = s, st->copy_max = s, st->budget_held = r2s__rdma_conn_cost(s, s);
  return 0;
}

int rd_offer(r2s_tp_state_t **out, r2s_handshake_t *hs, const r2s_tp_conn_t *conn)
{
  r2s_rdma_port_t port;
  int rc = r2s__rdma_port_for(&conn->local, &port);
  if (rc < 0) return rc;
  r2s_tp_state_t *st = calloc(1, sizeof *st);
  if (!st) {
    r2s__rdma_dev_put(port.dev);
    return -ENOMEM;
  }
  pthread_mutex_init(&st->post_lock, NULL);
  pthread_mutex_init(&st->rx_lock, NULL);
  st->port = port;
  st->gen = port.dev->gen;
  st->dupfd = -1;
  uint64_t size;
  if ((rc = offer_size(st, r2s__rdma_pin_unlimited(), &size)) < 0) {
    R2S_STAT_INC(rdma_no_budget);
    if (__atomic_exchange_n(&warned_no_budget, 1, __ATOMIC_RELAXED) == 0)
      r2s__warn("RDMA: the memory budget (%llu bytes: R2SOCK_RDMA_MEMORY, within 3/4 of ulimit -l) has no room "
                "for another connection's rings: such connections stay on TCP",
                (unsigned long long)r2s__rdma_budget());
    else
      r2s__debug("RDMA: no room in the memory budget for this connection: it stays on TCP");
    r2s__rdma_dev_put(port.dev);
    rd_free_state(st);
    return rc;
  }
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
  if (to_init(st) != 0 || rd_post_recvs(st, RQ_DEPTH) < 0 || ibv_req_notify_cq(st->rcq, 0) != 0) goto err_errno;
  st->dupfd = r2s__libc.fcntl(conn->fd, F_DUPFD_CLOEXEC, 512);
  if (st->dupfd < 0) goto err_errno;
  if (r2s__sock_ino(st->dupfd, &st->dup_ino) < 0) goto err_errno;
  st->wake = conn->wake;
  st->lost = conn->lost;
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
  hs->caps |= R2S_CAP_RDMA_IMM | R2S_CAP_RDMA_CLOSE_IMM;
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
  rd_destroy(st);
  rd_free_state(st);
  return rc;
}

/* Any peer: a device that cannot reach it fails the offer or the connect,
 * and the connection stays on TCP. */
int rd_rank(const r2s_tp_conn_t *conn)
{
  (void)conn;
  return 1;
}

bool rd_reaches(const r2s_handshake_t *mine, const r2s_handshake_t *peer)
{
  (void)mine;
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(peer, &o) == 1;
}

int rd_check(const r2s_handshake_t *peer)
{
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(peer, &o) < 0 ? -EPROTO : 0;
}

/* The peer made no RDMA offer (its budget had no room, or it has no
 * device): having no queue pair of its own, it can never write to ours,
 * so our registrations go now, and their budget with them, not when the
 * connection ends. The queue pair, never connected, stays for the state's
 * end; nothing uses the regions again (posting needs a connected queue
 * pair, and the peer's ring was never copied). */
static void shed(r2s_tp_state_t *st)
{
  if (st->own_mr) (void)R2S_V(ibv_dereg_mr)(st->own_mr);
  if (st->credit_mr) (void)R2S_V(ibv_dereg_mr)(st->credit_mr);
  st->own_mr = st->credit_mr = NULL;
  give_back(st);
}

int rd_connect(r2s_tp_state_t *st, const r2s_handshake_t *peer)
{
  if (foreign(st)) return -ECONNRESET;
  r2s_offer_rdma_t offer;
  const r2s_offer_rdma_t *o = &offer;
  if (r2s__rdma_offer_get(peer, &offer) != 1) {
    shed(st);
    return -ENOPROTOOPT;
  }
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
  /* The copy attach makes is this large, not our FIT offer's largest;
   * larger only facing an older peer, which sends no FIT offer. */
  if (peer_size <= st->copy_max) {
    r2s__rdma_budget_give(st->copy_max - peer_size);
  } else if (!r2s__rdma_budget_take(peer_size - st->copy_max)) {
    r2s__debug("RDMA: no room in the memory budget for a copy of the peer's %llu-byte ring: staying on TCP",
               (unsigned long long)peer_size);
    return -ENOBUFS;
  }
  st->budget_held = st->budget_held - st->copy_max + peer_size;
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
  bool imm = (peer->caps & R2S_CAP_RDMA_IMM) != 0;
  __atomic_store_n(&st->peer_close_imm, imm && (peer->caps & R2S_CAP_RDMA_CLOSE_IMM), __ATOMIC_RELEASE);
  __atomic_store_n(&st->peer_imm, imm, __ATOMIC_RELEASE);
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

int rd_attach(r2s_tp_state_t *st, const r2s_handshake_t *peer)
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

void rd_seal(r2s_tp_state_t *st)
{
  (void)st; /* nothing is named: the rkeys are in this connection's TCP stream only */
}

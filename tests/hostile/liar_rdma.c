/* The verbs side of lying_peer's RDMA cases (liar_rdma.h). Built like the
 * shim's own end (src/transport/rdma*.c) from the outside: the same ring
 * layout, the same queue pair attributes, so that honest runs prove the
 * liar speaks the protocol and the lies are the only difference. */
#include "liar_rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ring.h"

#define RQ_DEPTH  R2S_RDMA_RECVS /* what a peer with data immediates counts on */
#define SCRATCH   4096
#define CLINE_OFF 64 /* the consumer line in a ring's control page (ring.h) */
#define CLINE_LEN 64
#define WAIT_NS   10000000000ll

struct liar_rdma_s {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  uint8_t port;
  int gid_index;
  union ibv_gid gid;
  uint16_t lid;
  enum ibv_mtu mtu;
  bool roce;
  uint32_t psn, max_inline;
  uint64_t ring_size, fit;
  uint8_t *in_mem, *out_ctl, *out_data, *scratch;
  struct ibv_mr *in_mr, *credit_mr, *out_mr, *scratch_mr;
  lr_peer_t peer;
};

static long long now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* The device, port and GID that own the socket's local address. */
static bool find_port(liar_rdma_t *lr, int fd)
{
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sin_family != AF_INET) return false;
  union ibv_gid want;
  memset(&want, 0, sizeof want);
  want.raw[10] = want.raw[11] = 0xff;
  memcpy(want.raw + 12, &sa.sin_addr, 4);
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  int best_rank = 0;
  for (int i = 0; list && i < n && best_rank < 2; i++) {
    struct ibv_context *ctx = ibv_open_device(list[i]);
    struct ibv_device_attr da;
    if (!ctx || ibv_query_device(ctx, &da) != 0) {
      if (ctx) ibv_close_device(ctx);
      continue;
    }
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
      struct ibv_port_attr pa;
      if (ibv_query_port(ctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
      for (int g = 0; g < pa.gid_tbl_len; g++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, p, (uint32_t)g, &e, 0) != 0 || memcmp(e.gid.raw, want.raw, 16) != 0)
          continue;
        int rank = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
        if (rank <= best_rank) continue;
        if (lr->ctx && lr->ctx != ctx) ibv_close_device(lr->ctx);
        lr->ctx = ctx, lr->port = p, lr->gid_index = g, lr->gid = e.gid, lr->lid = pa.lid;
        lr->mtu = pa.active_mtu, lr->roce = pa.link_layer != IBV_LINK_LAYER_INFINIBAND;
        best_rank = rank;
      }
    }
    if (lr->ctx != ctx) ibv_close_device(ctx);
  }
  if (list) ibv_free_device_list(list);
  return best_rank > 0;
}

static int post_recvs(liar_rdma_t *lr, int k)
{
  for (int i = 0; i < k; i++) {
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    if (ibv_post_recv(lr->qp, &wr, &bad)) return -1;
  }
  return 0;
}

liar_rdma_t *lr_open(int fd, uint64_t ring_size, uint8_t **in_mem, uint8_t **out_ctl)
{
  liar_rdma_t *lr = calloc(1, sizeof *lr);
  const char *what = "memory";
  if (!lr) goto err;
  lr->ring_size = ring_size;
  what = "an RDMA port with a GID for the socket's address";
  if (!find_port(lr, fd)) goto err;
  what = "verbs objects";
  if (!(lr->pd = ibv_alloc_pd(lr->ctx)) || !(lr->scq = ibv_create_cq(lr->ctx, 64, NULL, NULL, 0)) ||
      !(lr->rcq = ibv_create_cq(lr->ctx, RQ_DEPTH, NULL, NULL, 0)))
    goto err;
  if (posix_memalign((void **)&lr->in_mem, 4096, r2s__ring_bytes(ring_size)) ||
      posix_memalign((void **)&lr->out_ctl, 4096, 4096) ||
      posix_memalign((void **)&lr->scratch, 4096, SCRATCH))
    goto err;
  memset(lr->in_mem, 0, R2S_RING_CTL_SIZE);
  memset(lr->out_ctl, 0, 4096);
  int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (!(lr->in_mr = ibv_reg_mr(lr->pd, lr->in_mem, r2s__ring_bytes(ring_size), rw)) ||
      !(lr->credit_mr = ibv_reg_mr(lr->pd, lr->out_ctl + CLINE_OFF, CLINE_LEN, rw)) ||
      !(lr->scratch_mr = ibv_reg_mr(lr->pd, lr->scratch, SCRATCH, IBV_ACCESS_LOCAL_WRITE)))
    goto err;
  struct ibv_qp_init_attr qa = {
      .send_cq = lr->scq,
      .recv_cq = lr->rcq,
      .cap = {.max_send_wr = 16,
              .max_recv_wr = RQ_DEPTH,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = 64},
      .qp_type = IBV_QPT_RC,
  };
  if (!(lr->qp = ibv_create_qp(lr->pd, &qa))) goto err;
  lr->max_inline = qa.cap.max_inline_data;
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = lr->port, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(lr->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
      post_recvs(lr, RQ_DEPTH) < 0)
    goto err;
  uint32_t rnd = 0;
  (void)getrandom(&rnd, sizeof rnd, 0);
  lr->psn = rnd & 0xffffff;
  *in_mem = lr->in_mem;
  *out_ctl = lr->out_ctl;
  return lr;
err:
  fprintf(stderr, "lying_peer: RDMA: no %s (%s)\n", what, strerror(errno));
  return NULL; /* the process ends soon after: nothing to undo */
}

void lr_offer(const liar_rdma_t *lr, r2s_offer_rdma_t *o)
{
  memset(o, 0, sizeof *o);
  o->qpn = lr->qp->qp_num;
  o->psn = lr->psn;
  memcpy(o->gid, lr->gid.raw, 16);
  o->lid = lr->lid;
  o->mtu = (uint8_t)lr->mtu;
  o->ring_addr = (uintptr_t)lr->in_mem;
  o->ring_size = lr->ring_size;
  o->ring_rkey = lr->in_mr->rkey;
  o->credit_addr = (uintptr_t)(lr->out_ctl + CLINE_OFF);
  o->credit_rkey = lr->credit_mr->rkey;
}

void lr_fit(liar_rdma_t *lr, uint64_t copy_max)
{
  lr->fit = copy_max;
}

int lr_connect(liar_rdma_t *lr, const r2s_offer_rdma_t *o)
{
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = o->mtu < lr->mtu ? (enum ibv_mtu)o->mtu : lr->mtu,
      .dest_qp_num = o->qpn,
      .rq_psn = o->psn,
      .max_dest_rd_atomic = 0,
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = o->lid, .port_num = lr->port},
  };
  if (lr->roce) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, o->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)lr->gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(lr->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  /* The shim's own retries: a refused access is answered at once (a NAK),
   * and a loaded guest can delay an honest acknowledgement a lot. */
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS,
                          .sq_psn = lr->psn,
                          .timeout = 14,
                          .retry_cnt = 7,
                          .rnr_retry = 7,
                          .max_rd_atomic = 1};
  if (ibv_modify_qp(lr->qp, &r,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    return -1;
  lr->peer = (lr_peer_t){.ring = o->ring_addr,
                         .credit = o->credit_addr,
                         .ring_size = lr->fit && o->copy_max && o->ring_size > lr->fit ? lr->fit : o->ring_size,
                         .ring_rkey = o->ring_rkey,
                         .credit_rkey = o->credit_rkey};
  return 0;
}

int lr_attach_out(liar_rdma_t *lr, uint8_t **out_data)
{
  if (posix_memalign((void **)&lr->out_data, 4096, lr->peer.ring_size)) return -1;
  if (!(lr->out_mr = ibv_reg_mr(lr->pd, lr->out_data, lr->peer.ring_size, IBV_ACCESS_LOCAL_WRITE))) return -1;
  *out_data = lr->out_data;
  return 0;
}

const lr_peer_t *lr_peer(const liar_rdma_t *lr)
{
  return &lr->peer;
}

/* Posts the chain wr[0..n) signalled and waits for its n completions;
 * returns the first status that is not success, or -1. */
static int post_wait(liar_rdma_t *lr, struct ibv_send_wr *wr, int n)
{
  for (int i = 0; i < n; i++) {
    wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
    wr[i].send_flags |= IBV_SEND_SIGNALED;
  }
  struct ibv_send_wr *bad;
  if (ibv_post_send(lr->qp, wr, &bad)) return -1;
  int got = 0, status = IBV_WC_SUCCESS;
  long long end = now_ns() + WAIT_NS;
  while (got < n) {
    struct ibv_wc wc;
    int k = ibv_poll_cq(lr->scq, 1, &wc);
    if (k < 0) return -1;
    if (k == 0) {
      if (now_ns() > end) return -1;
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
      continue;
    }
    got++;
    if (wc.status != IBV_WC_SUCCESS && status == IBV_WC_SUCCESS) status = wc.status;
  }
  return status;
}

static void set_write(liar_rdma_t *lr, struct ibv_send_wr *wr, struct ibv_sge *sge, const void *local,
                      uint32_t len, uint64_t raddr, uint32_t rkey)
{
  memset(wr, 0, sizeof *wr);
  if (len <= lr->max_inline) {
    *sge = (struct ibv_sge){.addr = (uintptr_t)local, .length = len, .lkey = 0};
    wr->send_flags = IBV_SEND_INLINE;
  } else {
    memcpy(lr->scratch, local, len); /* callers keep len <= SCRATCH */
    *sge = (struct ibv_sge){.addr = (uintptr_t)lr->scratch, .length = len, .lkey = lr->scratch_mr->lkey};
  }
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->wr.rdma.remote_addr = raddr;
  wr->wr.rdma.rkey = rkey;
}

int lr_write(liar_rdma_t *lr, const void *local, uint32_t len, uint64_t raddr, uint32_t rkey, int64_t imm)
{
  if (len > SCRATCH) return -1;
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  set_write(lr, &wr, &sge, local, len, raddr, rkey);
  if (imm >= 0) {
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl((uint32_t)imm);
  }
  return post_wait(lr, &wr, 1);
}

int lr_put(liar_rdma_t *lr, uint64_t from, uint64_t to)
{
  struct ibv_send_wr wr[3];
  struct ibv_sge sge[3];
  int k = 0;
  uint64_t size = lr->peer.ring_size;
  for (uint64_t pos = from; pos < to; k++) {
    uint64_t off = pos & (size - 1), len = to - pos;
    if (len > size - off) len = size - off;
    memset(&wr[k], 0, sizeof wr[k]);
    sge[k] = (struct ibv_sge){
        .addr = (uintptr_t)(lr->out_data + off), .length = (uint32_t)len, .lkey = lr->out_mr->lkey};
    wr[k].opcode = IBV_WR_RDMA_WRITE;
    wr[k].sg_list = &sge[k];
    wr[k].num_sge = 1;
    wr[k].wr.rdma.remote_addr = lr->peer.ring + R2S_RING_CTL_SIZE + off;
    wr[k].wr.rdma.rkey = lr->peer.ring_rkey;
    pos += len;
  }
  uint64_t tail = to;
  set_write(lr, &wr[k], &sge[k], &tail, 8, lr->peer.ring + offsetof(r2s_ring_ctl_t, tail),
            lr->peer.ring_rkey);
  return post_wait(lr, wr, k + 1);
}

int lr_read(liar_rdma_t *lr, void *local, uint32_t len, uint64_t raddr, uint32_t rkey)
{
  if (len > SCRATCH) return -1;
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  struct ibv_sge sge = {.addr = (uintptr_t)lr->scratch, .length = len, .lkey = lr->scratch_mr->lkey};
  memcpy(lr->scratch, local, len); /* the caller's poison: must survive a refused read */
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  int st = post_wait(lr, &wr, 1);
  memcpy(local, lr->scratch, len);
  return st;
}

int lr_send(liar_rdma_t *lr, const void *local, uint32_t len)
{
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  set_write(lr, &wr, &sge, local, len, 0, 0);
  wr.opcode = IBV_WR_SEND;
  return post_wait(lr, &wr, 1);
}

int lr_reap_recvs(liar_rdma_t *lr)
{
  struct ibv_wc wc[16];
  int k, n = 0;
  while ((k = ibv_poll_cq(lr->rcq, 16, wc)) > 0) n += k;
  if (n && post_recvs(lr, n) < 0) return -1;
  return n;
}

const char *lr_status_str(int status)
{
  return status < 0 ? "not completed" : ibv_wc_status_str((enum ibv_wc_status)status);
}

bool lr_refused(int status, bool read_ok)
{
  return status == IBV_WC_REM_ACCESS_ERR || (read_ok && status == IBV_WC_REM_INV_REQ_ERR);
}

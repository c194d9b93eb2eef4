/* bench-verbs-pp: the RDMA transport's ping-pong without the shim, i.e. what
 * the device costs for the shim's own pattern of verbs, so that a ping-pong
 * under the shim can be split into the device's part and the shim's.
 *
 *   usage: bench-verbs-pp -s [-p PORT] [-d DEVICE] [-g GID_INDEX]
 *          bench-verbs-pp -c HOST [-w] [-p PORT] [-d DEVICE] [-g GID_INDEX] [-m BYTES] [-t SECONDS]
 *   the client prints "n=N median_us=M p99_us=P" (one way: half the round trip,
 *   as ib_write_lat and sockperf report), after 0.4 s of warm-up
 *
 * Each message is what src/transport/rdma_producer.c does for a small write:
 * the bytes are copied into a registered copy of the peer's 2 MiB ring, sent
 * with one RDMA WRITE WITH IMMEDIATE (inline up to 64 bytes; the immediate
 * carries the offset, where the shim sends its tail) to the same offset of
 * the peer's ring, one request in 32 asks for a completion; the reader polls its
 * receive completion queue, reposts one receive per completion and copies
 * the bytes out of its ring. The server answers every message with the same
 * bytes and the client checks them. The queue pair data is exchanged over a
 * TCP connection, which also ends the server when the client is done.
 *
 * -w (both ends, the client tells the server) measures the other way a
 * reader can learn of bytes, the one ib_write_lat uses: a plain RDMA WRITE
 * of the bytes followed, in the same write, by an 8-byte stamp (the
 * message's number) at the next 8-byte boundary, which the reader polls in
 * its memory. No receive is consumed and no completion made. It relies on
 * the bytes of one write being placed in order, as Soft-RoCE does and
 * perftest's latency tests assume; the shim's byte-stream ring has no room
 * for stamps, so this is a measure of what such a format would save.
 * Not part of the library; docs/rdma.md says what it found. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "options.h"

/* The shim's own ring size and receive depth; the send queue, the signal
 * interval and the inline limit are the transport's private choices
 * (transport/rdma_conn.h), copied. */
#define RING         R2S_RING_AUTO_RDMA
#define RQ_DEPTH     R2S_RDMA_RECVS
#define SQ_DEPTH     256u
#define SIGNAL_EVERY 32u
#define MAX_INLINE   64u
#define STAMP        8u /* -w: the stamp after the bytes */
#define MAX_MSG      (64u << 10)
#define WARMUP_S     0.4
#define MAX_SAMPLES  (1u << 22)

/* What each end tells the other, in network byte order on the wire. */
typedef struct {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
} peer_info_t;

typedef struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  struct ibv_mr *own_mr, *copy_mr;
  char *own, *copy; /* our ring (the peer writes it), our copy of the peer's */
  uint64_t tail;    /* bytes written into the peer's ring */
  uint64_t head;    /* -w: bytes read from ours */
  uint64_t sent, seen; /* -w: stamps written and found */
  bool stamped;        /* -w */
  unsigned unsignalled;
  peer_info_t peer;
} link_t;

static void die(const char *what, int err)
{
  fprintf(stderr, "bench-verbs-pp: %s%s%s\n", what, err ? ": " : "", err ? strerror(err) : "");
  exit(1);
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void full_io(int fd, void *buf, size_t n, bool rd)
{
  for (size_t done = 0; done < n;) {
    ssize_t k = rd ? read(fd, (char *)buf + done, n - done) : write(fd, (char *)buf + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      die(rd ? "the control connection ended early" : "cannot write the control connection",
          k < 0 ? errno : 0);
    done += (size_t)k;
  }
}

static void post_recv(link_t *l)
{
  struct ibv_recv_wr wr = {.wr_id = 0}, *bad;
  int rc = ibv_post_recv(l->qp, &wr, &bad);
  if (rc) die("ibv_post_recv", rc);
}

static struct ibv_context *open_device(const char *name)
{
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list) die("ibv_get_device_list", errno);
  struct ibv_context *ctx = NULL;
  for (int i = 0; i < n && !ctx; i++)
    if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  if (!ctx) die(name ? "no such RDMA device (or it cannot be opened)" : "no RDMA device", 0);
  return ctx;
}

static void setup(link_t *l, const char *dev, int gid_index, int ctl)
{
  l->ctx = open_device(dev);
  struct ibv_port_attr pa;
  if (ibv_query_port(l->ctx, 1, &pa)) die("ibv_query_port", errno);
  if (!(l->pd = ibv_alloc_pd(l->ctx))) die("ibv_alloc_pd", errno);
  if (posix_memalign((void **)&l->own, 4096, RING) || posix_memalign((void **)&l->copy, 4096, RING))
    die("out of memory", ENOMEM);
  memset(l->own, 0, RING);
  memset(l->copy, 0, RING);
  l->own_mr = ibv_reg_mr(l->pd, l->own, RING, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  l->copy_mr = ibv_reg_mr(l->pd, l->copy, RING, IBV_ACCESS_LOCAL_WRITE);
  if (!l->own_mr || !l->copy_mr) die("ibv_reg_mr (memlock limit? see ulimit -l)", errno);
  l->scq = ibv_create_cq(l->ctx, SQ_DEPTH, NULL, NULL, 0);
  l->rcq = ibv_create_cq(l->ctx, RQ_DEPTH, NULL, NULL, 0);
  if (!l->scq || !l->rcq) die("ibv_create_cq", errno);
  struct ibv_qp_init_attr qa = {
      .send_cq = l->scq,
      .recv_cq = l->rcq,
      .cap = {.max_send_wr = SQ_DEPTH,
              .max_recv_wr = RQ_DEPTH,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = MAX_INLINE + STAMP},
      .qp_type = IBV_QPT_RC,
  };
  if (!(l->qp = ibv_create_qp(l->pd, &qa))) die("ibv_create_qp", errno);
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  int rc = ibv_modify_qp(l->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) die("queue pair to INIT", rc);
  for (unsigned i = 0; i < RQ_DEPTH; i++) post_recv(l);

  union ibv_gid gid;
  if (ibv_query_gid(l->ctx, 1, gid_index, &gid)) die("ibv_query_gid", errno);
  uint32_t psn = (uint32_t)getpid() & 0xffffff;
  peer_info_t me = {.qpn = htonl(l->qp->qp_num), .psn = htonl(psn), .rkey = htonl(l->own_mr->rkey)};
  uint64_t addr = (uintptr_t)l->own;
  for (int i = 0; i < 8; i++) ((uint8_t *)&me.addr)[i] = (uint8_t)(addr >> (56 - 8 * i));
  memcpy(me.gid, gid.raw, 16);
  full_io(ctl, &me, sizeof me, false);
  full_io(ctl, &l->peer, sizeof l->peer, true);
  uint64_t paddr = 0;
  for (int i = 0; i < 8; i++) paddr = paddr << 8 | ((uint8_t *)&l->peer.addr)[i];
  l->peer.addr = paddr;
  l->peer.qpn = ntohl(l->peer.qpn), l->peer.psn = ntohl(l->peer.psn), l->peer.rkey = ntohl(l->peer.rkey);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = pa.active_mtu;
  a.dest_qp_num = l->peer.qpn;
  a.rq_psn = l->peer.psn;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, l->peer.gid, 16);
  a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.dlid = pa.lid;
  a.ah_attr.port_num = 1;
  rc = ibv_modify_qp(l->qp, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc) die("queue pair to RTR", rc);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14, a.retry_cnt = 6, a.rnr_retry = 7, a.sq_psn = psn;
  rc = ibv_modify_qp(l->qp, &a,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) die("queue pair to RTS", rc);
  char sync = 0; /* neither end writes before the other's queue pair is ready */
  full_io(ctl, &sync, 1, false);
  full_io(ctl, &sync, 1, true);
}

/* Ring bytes a message takes: -w adds padding to 8 bytes and the stamp. */
static uint32_t footprint(const link_t *l, uint32_t n)
{
  return l->stamped ? ((n + STAMP - 1) & ~(STAMP - 1)) + STAMP : n;
}

/* Where the next message of `len` ring bytes starts at index *pos: no
 * wrap inside a message (both ends skip the same way). */
static uint64_t place(uint64_t *pos, uint32_t len)
{
  uint64_t off = *pos & (RING - 1);
  if (off + len > RING) {
    *pos += RING - off;
    off = 0;
  }
  return off;
}

static void put(link_t *l, const char *buf, uint32_t n)
{
  uint32_t len = footprint(l, n);
  uint64_t off = place(&l->tail, len);
  memcpy(l->copy + off, buf, n);
  if (l->stamped) {
    uint64_t stamp = ++l->sent;
    memcpy(l->copy + off + len - STAMP, &stamp, STAMP);
  }
  struct ibv_sge sge = {.addr = (uintptr_t)(l->copy + off), .length = len, .lkey = l->copy_mr->lkey};
  struct ibv_send_wr wr = {.opcode = l->stamped ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM,
                           .sg_list = &sge,
                           .num_sge = 1},
                     *bad;
  wr.send_flags = len <= MAX_INLINE + (l->stamped ? STAMP : 0) ? IBV_SEND_INLINE : 0;
  if (++l->unsignalled == SIGNAL_EVERY) wr.send_flags |= IBV_SEND_SIGNALED, l->unsignalled = 0;
  wr.wr.rdma.remote_addr = l->peer.addr + off;
  wr.wr.rdma.rkey = l->peer.rkey;
  l->tail += len;
  wr.imm_data = htonl((uint32_t)off);
  int rc = ibv_post_send(l->qp, &wr, &bad);
  if (rc) die("ibv_post_send", rc);
  struct ibv_wc wc;
  int k;
  while ((k = ibv_poll_cq(l->scq, 1, &wc)) > 0)
    if (wc.status != IBV_WC_SUCCESS) die(ibv_wc_status_str(wc.status), 0);
  if (k < 0) die("ibv_poll_cq (send)", 0);
}

/* Waits for the next message, copies it out; false if `ctl` reports the
 * peer gone (looked at now and then, so that a dead peer cannot hang us). */
static bool get(link_t *l, char *buf, uint32_t n, int ctl)
{
  if (l->stamped) {
    uint32_t len = footprint(l, n);
    uint64_t off = place(&l->head, len), want = ++l->seen;
    const uint64_t *stamp = (const uint64_t *)(l->own + off + len - STAMP);
    for (unsigned spins = 1; __atomic_load_n(stamp, __ATOMIC_ACQUIRE) != want; spins++) {
      if ((spins & 0xfffff) == 0) {
        struct pollfd p = {.fd = ctl, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) return false;
      }
    }
    memcpy(buf, l->own + off, n);
    l->head += len;
    return true;
  }
  struct ibv_wc wc;
  int k;
  for (unsigned spins = 1; (k = ibv_poll_cq(l->rcq, 1, &wc)) == 0; spins++) {
    if ((spins & 0xfffff) == 0) {
      struct pollfd p = {.fd = ctl, .events = POLLIN};
      if (poll(&p, 1, 0) > 0) return false;
    }
  }
  if (k < 0) die("ibv_poll_cq (receive)", 0);
  if (wc.status != IBV_WC_SUCCESS) die(ibv_wc_status_str(wc.status), 0);
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) die("a completion that is not a write with immediate", 0);
  post_recv(l);
  uint32_t off = ntohl(wc.imm_data);
  if (off > RING - n) die("the peer wrote past the ring", 0);
  memcpy(buf, l->own + off, n);
  return true;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int tcp_fd(const char *host, const char *port, bool server)
{
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = server ? AI_PASSIVE : 0},
                  *res;
  int rc = getaddrinfo(host, port, &hints, &res);
  if (rc) {
    fprintf(stderr, "bench-verbs-pp: %s: %s\n", host ? host : "listen address", gai_strerror(rc));
    exit(1);
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0) die("socket", errno);
  if (server) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1)) die("bind/listen", errno);
    int c = accept(fd, NULL, NULL);
    if (c < 0) die("accept", errno);
    close(fd);
    fd = c;
  } else if (connect(fd, res->ai_addr, res->ai_addrlen)) {
    die("connect", errno);
  }
  freeaddrinfo(res);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static void usage(void)
{
  fprintf(
      stderr,
      "usage: bench-verbs-pp -s [-p PORT] [-d DEVICE] [-g GID_INDEX]\n"
      "       bench-verbs-pp -c HOST [-w] [-p PORT] [-d DEVICE] [-g GID_INDEX] [-m BYTES] [-t SECONDS]\n");
  exit(2);
}

int main(int argc, char **argv)
{
  const char *host = NULL, *port = "18515", *dev = NULL;
  bool server = false, stamped = false;
  int gid_index = 1, opt;
  long size = 64;
  double secs = 3;
  while ((opt = getopt(argc, argv, "swc:p:d:g:m:t:")) != -1) {
    char *end = NULL;
    switch (opt) {
    case 's':
      server = true;
      break;
    case 'w':
      stamped = true;
      break;
    case 'c':
      host = optarg;
      break;
    case 'p':
      port = optarg;
      break;
    case 'd':
      dev = optarg;
      break;
    case 'g':
      gid_index = (int)strtol(optarg, &end, 10);
      if (*end || gid_index < 0) usage();
      break;
    case 'm':
      size = strtol(optarg, &end, 10);
      if (*end || size < 1 || size > MAX_MSG) usage();
      break;
    case 't':
      secs = strtod(optarg, &end);
      if (*end || !(secs > 0 && secs <= 3600)) usage();
      break;
    default:
      usage();
    }
  }
  if (server == (host != NULL) || optind != argc) usage();
  int ctl = tcp_fd(host, port, server);
  /* The size, and in its top bit -w. */
  uint32_t n = (uint32_t)size, wire = htonl(n | (stamped ? 1u << 31 : 0));
  if (server) {
    full_io(ctl, &wire, 4, true);
    n = ntohl(wire) & ~(1u << 31);
    stamped = ntohl(wire) >> 31;
    if (n < 1 || n > MAX_MSG) die("bad message size from the client", 0);
  } else {
    full_io(ctl, &wire, 4, false);
  }
  static link_t l;
  l.stamped = stamped;
  setup(&l, dev, gid_index, ctl);
  static char out[MAX_MSG], in[MAX_MSG];
  if (server) {
    while (get(&l, in, n, ctl)) put(&l, in, n);
    return 0;
  }
  double *lat = malloc(MAX_SAMPLES * sizeof *lat);
  if (!lat) die("out of memory", ENOMEM);
  size_t got = 0;
  uint32_t seq = 0;
  double t0 = now(), end = t0 + WARMUP_S + secs;
  for (double t = t0; t < end; t = now()) {
    for (uint32_t i = 0; i < n; i++) out[i] = (char)(seq + i * 7u);
    put(&l, out, n);
    if (!get(&l, in, n, ctl)) die("the server went away", 0);
    if (memcmp(in, out, n) != 0) die("the answer differs from the message", 0);
    if (t >= t0 + WARMUP_S && got < MAX_SAMPLES) lat[got++] = (now() - t) * 1e6 / 2;
    seq++;
  }
  if (got == 0) die("no message after the warm-up", 0);
  qsort(lat, got, sizeof *lat, cmp_double);
  printf("n=%zu median_us=%.2f p99_us=%.2f\n", got, lat[got / 2], lat[got * 99 / 100]);
  free(lat);
  return 0;
}

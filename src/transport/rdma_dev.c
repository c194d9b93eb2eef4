/* RDMA devices for the RDMA transport: which port and GID serve a
 * connection, the verbs objects each process opens once, and the thread
 * that hears the peers' sleep announcements (rdma.h). */
#include "rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clock.h"
#include "../init.h"
#include "../libc.h"
#include "../log.h"
#include "../options.h"
#include "../thread.h"

unsigned r2s__rdma_fork_gen;

static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static r2s_rdma_dev_t *devs;
/* A host without RDMA devices answers the same for a while: connections
 * to other hosts should not each pay for a scan of sysfs. */
#define NO_DEVICE_RECHECK_NS 5000000000ll
static int64_t no_device_until;

/* The states the progress threads may look at (see untrack). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_idle = PTHREAD_COND_INITIALIZER;
typedef struct live_s {
  r2s_tp_state_t *st;
  r2s_rdma_dev_t *dev;
} live_t;
static live_t *live;
static size_t nlive, live_cap;
#define MAX_THREADS 8
static r2s_tp_state_t *busy[MAX_THREADS]; /* what each progress thread is handling */
static bool slot_used[MAX_THREADS];

static void fork_child(void)
{
  /* The parent's devices, queue pairs and threads are not ours: forget
   * them without touching them (rdma.h). */
  r2s__rdma_fork_gen++;
  pthread_mutex_init(&devs_lock, NULL);
  pthread_mutex_init(&live_lock, NULL);
  pthread_cond_init(&live_idle, NULL);
  devs = NULL;
  no_device_until = 0;
  nlive = 0;
  memset(slot_used, 0, sizeof slot_used);
  memset(busy, 0, sizeof busy);
}

static void register_fork(void)
{
  pthread_atfork(NULL, NULL, fork_child);
}

/* ---- the progress thread ---- */

static void free_slot(int slot)
{
  pthread_mutex_lock(&live_lock);
  slot_used[slot] = false;
  pthread_mutex_unlock(&live_lock);
}

typedef struct progress_s {
  r2s_rdma_dev_t *dev;
  int slot;
} progress_t;

static r2s_tp_state_t *find_live(const void *p)
{
  for (size_t i = 0; i < nlive; i++)
    if (live[i].st == p) return live[i].st;
  return NULL;
}

static void close_dev(r2s_rdma_dev_t *d);

/* Runs fn(st) for the tracked state p, marked busy (see untrack). */
static void with_live(int slot, const void *p, void (*fn)(r2s_tp_state_t *, const char *), const char *why)
{
  pthread_mutex_lock(&live_lock);
  r2s_tp_state_t *st = find_live(p);
  busy[slot] = st;
  pthread_mutex_unlock(&live_lock);
  if (!st) return;
  fn(st, why);
  pthread_mutex_lock(&live_lock);
  busy[slot] = NULL;
  pthread_cond_broadcast(&live_idle);
  pthread_mutex_unlock(&live_lock);
}

static void on_cq_event(r2s_tp_state_t *st, const char *why)
{
  (void)why;
  r2s__rdma_on_event(st);
}

/* The device went away (DEVICE_FATAL: unplugged, `rdma link delete`):
 * every connection on it ends, and the device is closed with the last of
 * them, or the kernel would wait for this process forever. */
static void device_died(r2s_rdma_dev_t *d)
{
  r2s__warn("RDMA device %s failed: its connections are reset", d->name);
  pthread_mutex_lock(&devs_lock);
  for (r2s_rdma_dev_t **pp = &devs; *pp; pp = &(*pp)->next)
    if (*pp == d) {
      *pp = d->next;
      break;
    }
  pthread_mutex_unlock(&devs_lock);
  pthread_mutex_lock(&live_lock);
  d->dead = true;
  for (size_t i = 0; i < nlive; i++)
    if (live[i].dev == d) r2s__rdma_on_fatal(live[i].st, "the device failed");
  d->thread_done = true;
  bool close_now = d->nstates == 0;
  pthread_mutex_unlock(&live_lock);
  if (close_now) close_dev(d);
}

/* Returns false once the device died and the thread must stop. */
static bool on_async_event(progress_t *pr)
{
  struct ibv_async_event ev;
  if (R2S_V(ibv_get_async_event)(pr->dev->ctx, &ev) != 0) return true;
  enum ibv_event_type t = ev.event_type;
  void *qp_ctx = (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR)
                     ? ev.element.qp->qp_context
                     : NULL;
  R2S_V(ibv_ack_async_event)(&ev);
  if (qp_ctx) with_live(pr->slot, qp_ctx, r2s__rdma_on_fatal, "the queue pair failed");
  if (t != IBV_EVENT_DEVICE_FATAL) return true;
  device_died(pr->dev);
  return false;
}

/* Once a second: a device nobody has held for IDLE_CLOSE_NS is closed.
 * Returns false when the thread must stop (the device is closed). */
#define IDLE_CLOSE_NS 2000000000ll
static bool tick(progress_t *pr)
{
  r2s_rdma_dev_t *d = pr->dev;
  /* devs_lock first: port_for() takes references under it */
  pthread_mutex_lock(&devs_lock);
  pthread_mutex_lock(&live_lock);
  bool idle = d->nstates == 0 && r2s__now_ns() - d->idle_since > IDLE_CLOSE_NS;
  if (idle) {
    for (r2s_rdma_dev_t **pp = &devs; *pp; pp = &(*pp)->next)
      if (*pp == d) {
        *pp = d->next;
        break;
      }
    d->thread_done = true;
  }
  pthread_mutex_unlock(&live_lock);
  pthread_mutex_unlock(&devs_lock);
  if (!idle) return true;
  r2s__debug("RDMA device %s closed (unused)", d->name);
  close_dev(d);
  return false;
}

static void *progress_main(void *arg)
{
  progress_t pr = *(progress_t *)arg;
  free(arg);
  r2s__in_shim++; /* its socket calls (doorbells) are the shim's own */
  struct pollfd fds[2] = {{pr.dev->chan->fd, POLLIN, 0}, {pr.dev->ctx->async_fd, POLLIN, 0}};
  int64_t next_tick = r2s__now_ns() + 1000000000ll;
  for (;;) {
    int64_t wait_ms = (next_tick - r2s__now_ns()) / 1000000;
    int rc = r2s__libc.poll(fds, 2, wait_ms < 0 ? 0 : (int)wait_ms);
    if (rc < 0 && errno != EINTR) {
      r2s__warn("RDMA progress thread stops: %s", strerror(errno));
      break;
    }
    if (r2s__now_ns() >= next_tick) {
      next_tick = r2s__now_ns() + 1000000000ll;
      if (!tick(&pr)) break;
    }
    if (rc <= 0) continue;
    if ((fds[1].revents & POLLIN) && !on_async_event(&pr)) break;
    if (!(fds[0].revents & POLLIN)) continue;
    struct ibv_cq *cq;
    void *ctx;
    if (R2S_V(ibv_get_cq_event)(pr.dev->chan, &cq, &ctx) < 0) continue;
    /* Acknowledged before the state is looked up: destroying a CQ waits
     * for its events' acknowledgements, and its owner may be doing that
     * right now while holding on to nothing we need. */
    R2S_V(ibv_ack_cq_events)(cq, 1);
    with_live(pr.slot, ctx, on_cq_event, NULL);
  }
  free_slot(pr.slot);
  return NULL;
}

static int start_progress(r2s_rdma_dev_t *dev)
{
  pthread_mutex_lock(&live_lock);
  int slot = -1;
  for (int i = 0; i < MAX_THREADS && slot < 0; i++)
    if (!slot_used[i]) slot = i, slot_used[i] = true;
  pthread_mutex_unlock(&live_lock);
  if (slot < 0) return -EMFILE;
  progress_t *pr = malloc(sizeof *pr);
  if (!pr) return -ENOMEM;
  pr->dev = dev;
  pr->slot = slot;
  int rc = r2s__thread_start(progress_main, pr);
  if (rc) {
    free(pr);
    free_slot(slot);
  }
  return rc;
}

void r2s__rdma_track(r2s_tp_state_t *st, r2s_rdma_dev_t *dev)
{
  pthread_mutex_lock(&live_lock);
  if (nlive == live_cap) {
    size_t cap = live_cap ? live_cap * 2 : 64;
    live_t *n = realloc(live, cap * sizeof *n);
    if (n) live = n, live_cap = cap;
  }
  /* Without room the state is simply never woken by its thread: its peer's
   * sleep announcements then go unanswered, and its waits end at the
   * 100 ms slice instead (slow, never stuck). */
  if (nlive < live_cap) live[nlive++] = (live_t){st, dev};
  pthread_mutex_unlock(&live_lock);
}

void r2s__rdma_dev_put(r2s_rdma_dev_t *dev)
{
  pthread_mutex_lock(&live_lock);
  bool close_now = --dev->nstates == 0 && dev->dead && dev->thread_done;
  if (dev->nstates == 0) dev->idle_since = r2s__now_ns();
  pthread_mutex_unlock(&live_lock);
  if (close_now) close_dev(dev);
}

void r2s__rdma_untrack(r2s_tp_state_t *st)
{
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < nlive; i++)
    if (live[i].st == st) {
      live[i] = live[--nlive];
      break;
    }
  for (;;) {
    bool in_use = false;
    for (int i = 0; i < MAX_THREADS; i++) in_use |= busy[i] == st;
    if (!in_use) break;
    pthread_cond_wait(&live_idle, &live_lock);
  }
  pthread_mutex_unlock(&live_lock);
}

void r2s__rdma_for_each(void (*fn)(r2s_tp_state_t *, uint64_t), uint64_t arg)
{
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < nlive; i++) fn(live[i].st, arg);
  pthread_mutex_unlock(&live_lock);
}

/* ---- devices ---- */

static void close_dev(r2s_rdma_dev_t *d)
{
  if (d->chan) (void)R2S_V(ibv_destroy_comp_channel)(d->chan);
  if (d->ctx) (void)R2S_V(ibv_close_device)(d->ctx);
  free(d);
}

/* The open device named like dev, opened now if need be; devs_lock held. */
static r2s_rdma_dev_t *get_dev(struct ibv_device *dev)
{
  const char *name = R2S_V(ibv_get_device_name)(dev);
  for (r2s_rdma_dev_t *d = devs; d; d = d->next)
    if (strcmp(d->name, name) == 0) return d;
  r2s_rdma_dev_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  snprintf(d->name, sizeof d->name, "%s", name);
  d->gen = r2s__rdma_fork_gen;
  d->ctx = R2S_V(ibv_open_device)(dev);
  if (!d->ctx || R2S_V(ibv_query_device)(d->ctx, &d->attr) != 0 ||
      !(d->chan = R2S_V(ibv_create_comp_channel)(d->ctx)) || start_progress(d) < 0) {
    r2s__warn("RDMA device %s: cannot open it (%s)", name, strerror(errno ? errno : EIO));
    close_dev(d);
    return NULL;
  }
  d->next = devs;
  devs = d;
  r2s__debug("RDMA device %s open", name);
  return d;
}

/* The GID an address has in a RoCE GID table: the IPv6 address itself, or
 * an IPv4 one mapped into ::ffff:0:0/96. */
static bool addr_gid(const struct sockaddr_storage *ss, union ibv_gid *gid)
{
  memset(gid, 0, sizeof *gid);
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
    gid->raw[10] = gid->raw[11] = 0xff;
    memcpy(gid->raw + 12, &in->sin_addr, 4);
    return true;
  }
  if (ss->ss_family == AF_INET6) {
    memcpy(gid->raw, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    return true;
  }
  return false;
}

/* On InfiniBand the address belongs to an IPoIB interface, whose 20-byte
 * hardware address ends with its port's GID. */
static bool ipoib_gid(const struct sockaddr_storage *ss, union ibv_gid *gid)
{
  struct ifaddrs *ifs;
  if (getifaddrs(&ifs) < 0) return false;
  char ifname[IF_NAMESIZE] = "";
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != ss->ss_family) continue;
    bool same = ss->ss_family == AF_INET
                    ? ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                          ((const struct sockaddr_in *)ss)->sin_addr.s_addr
                    : memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                             &((const struct sockaddr_in6 *)ss)->sin6_addr, 16) == 0;
    if (same) snprintf(ifname, sizeof ifname, "%s", i->ifa_name);
  }
  bool found = false;
  for (struct ifaddrs *i = ifs; i && ifname[0]; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_PACKET || strcmp(i->ifa_name, ifname) != 0) continue;
    const struct sockaddr_ll *ll = (const struct sockaddr_ll *)i->ifa_addr;
    if (ll->sll_halen == 20) {
      memcpy(gid->raw, ll->sll_addr + 4, 16);
      found = true;
    }
  }
  freeifaddrs(ifs);
  return found;
}

/* How well GID entry e suits the connection (0: not at all).
 * R2SOCK_GID_INDEX takes the entry as it is; otherwise the address
 * decides, and RoCE v2 (routable, UDP) is preferred over v1. */
static int gid_rank(const struct ibv_gid_entry *e, const union ibv_gid *target, bool have_target)
{
  if (r2s__opt.gid_index >= 0) return 3;
  if (!have_target || memcmp(e->gid.raw, target->raw, 16) != 0) return 0;
  return e->gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
}

/* The device's valid GID entries, all ports, in one call: the table has
 * gid_tbl_len indexes per port (1024 on Soft-RoCE, two of them valid), and
 * a query per index made 1023 failing system calls per connection: 27 %
 * of all CPU samples of a run of short connections in a guest, idle
 * included (perf, 2026-11-23). NULL (and the caller scans) when the
 * library cannot, or the table outgrew max. */
static struct ibv_gid_entry *gid_table(r2s_rdma_dev_t *d, size_t max, ssize_t *n)
{
  if (!r2s__verbs._ibv_query_gid_table || r2s__opt.gid_index >= 0) return NULL;
  struct ibv_gid_entry *t = calloc(max ? max : 1, sizeof *t);
  if (!t) return NULL;
  *n = r2s__verbs._ibv_query_gid_table(d->ctx, t, max, 0, sizeof *t);
  if (*n >= 0) return t;
  free(t);
  return NULL;
}

/* Looks for the address's GID on one active port; devs_lock held. */
static bool match_port(r2s_rdma_dev_t *d, uint8_t port, const struct ibv_port_attr *pa,
                       const struct sockaddr_storage *local, r2s_rdma_port_t *out)
{
  int want = r2s__opt.gid_index;
  union ibv_gid target;
  bool ib = pa->link_layer == IBV_LINK_LAYER_INFINIBAND;
  bool have_target = ib ? ipoib_gid(local, &target) : addr_gid(local, &target);
  int best = -1, best_rank = 0;
  struct ibv_gid_entry e, best_e;
  ssize_t n = 0;
  struct ibv_gid_entry *t = gid_table(d, (size_t)d->attr.phys_port_cnt * (size_t)pa->gid_tbl_len, &n);
  if (t) {
    for (ssize_t i = 0; i < n; i++) {
      int rank = t[i].port_num == port ? gid_rank(&t[i], &target, have_target) : 0;
      if (rank > best_rank) best = (int)t[i].gid_index, best_rank = rank, best_e = t[i];
    }
    free(t);
  } else {
    for (int i = 0; i < pa->gid_tbl_len; i++) {
      if (want >= 0 && i != want) continue;
      if (R2S_V(_ibv_query_gid_ex)(d->ctx, port, (uint32_t)i, &e, 0, sizeof e) != 0) continue;
      int rank = gid_rank(&e, &target, have_target);
      if (rank > best_rank) best = i, best_rank = rank, best_e = e;
    }
  }
  if (best < 0) return false;
  out->dev = d;
  out->port = port;
  out->gid_index = best;
  out->gid = best_e.gid;
  out->lid = pa->lid;
  out->mtu = pa->active_mtu;
  out->roce = !ib;
  return true;
}


int r2s__rdma_port_for(const struct sockaddr_storage *local, r2s_rdma_port_t *out)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (r2s__verbs_load() < 0) return -ENOENT;
  pthread_once(&once, register_fork);
  pthread_mutex_lock(&devs_lock);
  int n = 0, rc = -ENODEV;
  int64_t now = r2s__now_ns();
  if (now < no_device_until) {
    pthread_mutex_unlock(&devs_lock);
    return rc;
  }
  struct ibv_device **list = R2S_V(ibv_get_device_list)(&n);
  if (!list || n == 0) no_device_until = now + NO_DEVICE_RECHECK_NS;
  for (int i = 0; list && i < n && rc < 0; i++) {
    const char *name = R2S_V(ibv_get_device_name)(list[i]);
    if (r2s__opt.device && strcmp(r2s__opt.device, name) != 0) continue;
    r2s_rdma_dev_t *d = get_dev(list[i]);
    if (!d) continue;
    for (uint8_t p = 1; p <= d->attr.phys_port_cnt && rc < 0; p++) {
      struct ibv_port_attr pa;
      if (r2s__verbs_query_port(d->ctx, p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
      if (match_port(d, p, &pa, local, out)) rc = 0;
    }
  }
  if (rc == 0) {
    pthread_mutex_lock(&live_lock);
    out->dev->nstates++;
    pthread_mutex_unlock(&live_lock);
  }
  if (list) R2S_V(ibv_free_device_list)(list);
  pthread_mutex_unlock(&devs_lock);
  return rc;
}

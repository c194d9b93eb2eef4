/* RDMA devices for the RDMA transport: which port and GID serve a
 * connection (the kernel's RDMA CM says which device and port own its
 * address), the verbs objects each process opens once, and the thread
 * that hears the peers' sleep announcements (rdma.h). */
#include "rdma.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clock.h"
#include "../libc.h"
#include "../log.h"
#include "../options.h"
#include "../rdmacm.h"
#include "../thread.h"
#include "rdma_gid.h"

unsigned r2s__rdma_fork_gen;

/* devs_lock: the list of the devices this process has open. Held only to
 * look a device up and count a reference on it (hold_open), to list one
 * (list_dev) or to unlist one (tick, device_died); never across a call
 * into libibverbs or librdmacm nor a thread's start, which can wait: a
 * device is opened with no lock held (get_dev). live_lock may be taken
 * under it, never the reverse. */
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
/* What each progress thread is handling, and in the last slot what the
 * exit's walk (r2s__rdma_for_each) is: untrack waits until no slot holds
 * the state it removes, so none is freed under its user. */
#define EXIT_SLOT MAX_THREADS
static r2s_tp_state_t *busy[MAX_THREADS + 1];
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
    if (live[i].dev == d) r2s__rdma_on_lost(live[i].st, "the device failed");
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
  /* A request or access error is the peer's doing: reset. */
  if (qp_ctx)
    with_live(pr->slot, qp_ctx, t == IBV_EVENT_QP_FATAL ? r2s__rdma_on_lost : r2s__rdma_on_fatal,
              "the queue pair failed");
  if (t != IBV_EVENT_DEVICE_FATAL) return true;
  device_died(pr->dev);
  return false;
}

/* Calls fn(st, arg) for every tracked state (of dev only, unless NULL),
 * each marked busy in `slot` while fn runs, with live_lock let go (fn may
 * take the state's locks and wait). Walked from the end: a state untracked
 * meanwhile may make another be seen twice or missed, which every caller
 * bears (the exit's drain, the liveness check of the next second). */
static void walk_live(size_t slot, const r2s_rdma_dev_t *dev, void (*fn)(r2s_tp_state_t *, uint64_t),
                      uint64_t arg)
{
  pthread_mutex_lock(&live_lock);
  for (size_t i = nlive; i-- > 0;) {
    if (i >= nlive || (dev && live[i].dev != dev)) continue;
    r2s_tp_state_t *st = live[i].st;
    busy[slot] = st;
    pthread_mutex_unlock(&live_lock);
    fn(st, arg);
    pthread_mutex_lock(&live_lock);
    busy[slot] = NULL;
    pthread_cond_broadcast(&live_idle);
  }
  pthread_mutex_unlock(&live_lock);
}

static void watch_one(r2s_tp_state_t *st, uint64_t unused)
{
  (void)unused;
  r2s__rdma_on_tick(st);
}

/* Once a second: a device nobody has held for IDLE_CLOSE_NS is closed.
 * Returns false when the thread must stop (the device is closed). */
#define IDLE_CLOSE_NS 2000000000ll
static bool tick(progress_t *pr)
{
  r2s_rdma_dev_t *d = pr->dev;
  /* devs_lock first: references are taken under it (hold_open) */
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
  if (!idle) {
    walk_live(pr->slot, pr->dev, watch_one, 0); /* the liveness check of each of its states */
    return true;
  }
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
    for (int i = 0; i <= EXIT_SLOT; i++) in_use |= busy[i] == st;
    if (!in_use) break;
    pthread_cond_wait(&live_idle, &live_lock);
  }
  pthread_mutex_unlock(&live_lock);
}

/* fn may wait (a drain), so it runs with live_lock let go and its state
 * marked busy in EXIT_SLOT: the progress threads go on, and a thread
 * closing that connection meanwhile waits in untrack. The walk runs from
 * the end: an untrack meanwhile moves the last state into the hole, which
 * is then seen twice at most (fn must bear that; a drain does), and a state
 * tracked meanwhile is not seen. One walker at a time (the exit). */
void r2s__rdma_for_each(void (*fn)(r2s_tp_state_t *, uint64_t), uint64_t arg)
{
  walk_live(EXIT_SLOT, NULL, fn, arg);
}

/* ---- devices ---- */

static void close_dev(r2s_rdma_dev_t *d)
{
  if (d->chan) (void)R2S_V(ibv_destroy_comp_channel)(d->chan);
  if (d->ctx) (void)R2S_V(ibv_close_device)(d->ctx);
  free(d);
}

/* Opens dev: its context, completion channel and progress thread, not yet
 * listed. The opener holds the first reference, counted before the
 * thread starts, so that the thread's tick cannot close the device before
 * the opener lists it or lets it go (list_dev). No lock held. */
static r2s_rdma_dev_t *open_dev(struct ibv_device *dev, const char *name)
{
  r2s_rdma_dev_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  snprintf(d->name, sizeof d->name, "%s", name);
  d->gen = r2s__rdma_fork_gen;
  d->nstates = 1;
  d->ctx = R2S_V(ibv_open_device)(dev);
  if (!d->ctx || R2S_V(ibv_query_device)(d->ctx, &d->attr) != 0 ||
      !(d->chan = R2S_V(ibv_create_comp_channel)(d->ctx)) || start_progress(d) < 0) {
    r2s__warn("RDMA device %s: cannot open it (%s)", name, strerror(errno ? errno : EIO));
    close_dev(d);
    return NULL;
  }
  r2s__debug("RDMA device %s open", name);
  return d;
}

/* The listed device named name, with a reference for the caller, or NULL;
 * devs_lock held. A device is unlisted (tick, device_died) under the same
 * lock, and closed only once unlisted and unheld, so the one found here
 * stays open until the caller lets its reference go. */
static r2s_rdma_dev_t *hold_open(const char *name)
{
  for (r2s_rdma_dev_t *d = devs; d; d = d->next)
    if (strcmp(d->name, name) == 0) {
      pthread_mutex_lock(&live_lock);
      d->nstates++;
      pthread_mutex_unlock(&live_lock);
      return d;
    }
  return NULL;
}

/* hold_open, taking devs_lock. */
static r2s_rdma_dev_t *hold_listed(const char *name)
{
  pthread_mutex_lock(&devs_lock);
  r2s_rdma_dev_t *d = hold_open(name);
  pthread_mutex_unlock(&devs_lock);
  return d;
}

/* Lists mine, just opened with its opener's reference, and returns it.
 * Unless another thread listed the same device meanwhile: the caller then
 * gets a reference on that one instead, and mine, listed nowhere, loses
 * its only reference and is closed by its own progress thread once idle
 * (tick). Nor if mine died before it could be listed (device_died found
 * nothing to unlist): NULL, and it is closed with that reference. */
static r2s_rdma_dev_t *list_dev(r2s_rdma_dev_t *mine)
{
  pthread_mutex_lock(&devs_lock);
  r2s_rdma_dev_t *d = hold_open(mine->name);
  pthread_mutex_lock(&live_lock);
  bool dead = mine->dead;
  pthread_mutex_unlock(&live_lock);
  if (!d && !dead) {
    mine->next = devs;
    devs = d = mine;
  }
  pthread_mutex_unlock(&devs_lock);
  if (d == mine) return d;
  if (d) r2s__debug("RDMA device %s: another thread opened it too; its copy serves", mine->name);
  r2s__rdma_dev_put(mine);
  return d;
}

/* The device named name, or the first device the library lists where name
 * is NULL, with a reference for the caller: the one this process has
 * open, else opened now. No lock is held while the devices are listed
 * (sysfs) or one is opened (list_dev settles two threads that opened the
 * same one at once). */
static r2s_rdma_dev_t *get_dev(const char *name)
{
  r2s_rdma_dev_t *d = name ? hold_listed(name) : NULL;
  if (d) return d;
  int n = 0;
  struct ibv_device **list = R2S_V(ibv_get_device_list)(&n);
  if (!list || n == 0) __atomic_store_n(&no_device_until, r2s__now_ns() + NO_DEVICE_RECHECK_NS, __ATOMIC_RELAXED);
  for (int i = 0; list && i < n; i++) {
    const char *dn = R2S_V(ibv_get_device_name)(list[i]);
    if (name && strcmp(dn, name) != 0) continue;
    if (!(d = hold_listed(dn)) && (d = open_dev(list[i], dn))) d = list_dev(d);
    break;
  }
  if (list) R2S_V(ibv_free_device_list)(list);
  return d;
}

/* Asks the kernel's RDMA CM which device and port own the address, and
 * which GID it has there: binding an rdma_cm id to it resolves the netdev
 * that holds the address to the RDMA port over that netdev (RoCE) or to
 * the IPoIB port (InfiniBand). The id is created synchronous (no event
 * channel of ours) and destroyed at once; its port is 0, an ephemeral one
 * of the RDMA CM's own port space, as the TCP connection's port may be
 * shared by many connections. Only the name of librdmacm's device is
 * kept: the shim opens its own context (get_dev), whose life it controls. */
static int cm_resolve(const struct sockaddr_storage *local, char *name, size_t len, uint8_t *port,
                      union ibv_gid *gid)
{
  if (r2s__rdmacm_load() < 0) return -ENOENT;
  struct sockaddr_storage a = *local;
  struct sockaddr_in *in = (struct sockaddr_in *)&a;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
  if (a.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
    /* a dual-stack socket's IPv4 address: the RDMA CM wants it as IPv4 */
    struct in_addr v4;
    memcpy(&v4, in6->sin6_addr.s6_addr + 12, 4);
    memset(&a, 0, sizeof a);
    in->sin_family = AF_INET;
    in->sin_addr = v4;
  }
  if (a.ss_family == AF_INET)
    in->sin_port = 0;
  else if (a.ss_family == AF_INET6)
    in6->sin6_port = 0;
  else
    return -ENODEV;
  struct rdma_cm_id *id;
  if (R2S_CM(rdma_create_id)(NULL, &id, NULL, RDMA_PS_TCP) != 0) {
    /* no device at all, or no RDMA CM in the kernel (rdma_ucm) */
    r2s__debug("no RDMA: rdma_create_id: %s", strerror(errno));
    __atomic_store_n(&no_device_until, r2s__now_ns() + NO_DEVICE_RECHECK_NS, __ATOMIC_RELAXED);
    return -ENODEV;
  }
  int rc = -ENODEV;
  if (R2S_CM(rdma_bind_addr)(id, (struct sockaddr *)&a) != 0)
    r2s__debug("RDMA: no device owns the local address (%s)", strerror(errno));
  else if (id->verbs) {
    snprintf(name, len, "%s", R2S_V(ibv_get_device_name)(id->verbs->device));
    *port = id->port_num;
    *gid = id->route.addr.addr.ibaddr.sgid;
    rc = 0;
  }
  R2S_CM(rdma_destroy_id)(id);
  return rc;
}

/* The port's GID entries: the device's valid entries, all ports, in one
 * call (the table has gid_tbl_len indexes per port, 1024 on Soft-RoCE with
 * two of them valid: a query per index made 1023 failing system calls per
 * connection), or one query per index of the port where libibverbs is
 * older than rdma-core 30. NULL without memory. */
static struct ibv_gid_entry *gid_entries(r2s_rdma_dev_t *d, uint8_t port, const struct ibv_port_attr *pa,
                                         size_t *n)
{
  size_t max = (size_t)d->attr.phys_port_cnt * (size_t)pa->gid_tbl_len;
  struct ibv_gid_entry *t = calloc(max ? max : 1, sizeof *t);
  if (!t) return NULL;
  ssize_t got = -1;
  if (r2s__verbs._ibv_query_gid_table) got = r2s__verbs._ibv_query_gid_table(d->ctx, t, max, 0, sizeof *t);
  if (got >= 0) {
    *n = (size_t)got;
    return t;
  }
  *n = 0;
  for (int i = 0; i < pa->gid_tbl_len; i++)
    if (R2S_V(_ibv_query_gid_ex)(d->ctx, port, (uint32_t)i, &t[*n], 0, sizeof *t) == 0) ++*n;
  return t;
}

/* Fills out for port of device d: the GID index R2SOCK_GID_INDEX names,
 * or the entry for gid (rdma_gid.h); a reference on d held. */
static int use_port(r2s_rdma_dev_t *d, uint8_t port, const struct ibv_port_attr *pa, const union ibv_gid *gid,
                    r2s_rdma_port_t *out)
{
  struct ibv_gid_entry e;
  if (r2s__opt.gid_index >= 0) {
    if (R2S_V(_ibv_query_gid_ex)(d->ctx, port, (uint32_t)r2s__opt.gid_index, &e, 0, sizeof e) != 0) {
      r2s__debug("RDMA: %s port %u has no GID index %d", d->name, port, r2s__opt.gid_index);
      return -ENODEV;
    }
  } else {
    size_t n;
    struct ibv_gid_entry *t = gid_entries(d, port, pa, &n);
    if (!t) return -ENOMEM;
    ssize_t i = r2s__rdma_gid_pick(t, n, port, gid);
    if (i >= 0) e = t[i];
    free(t);
    if (i < 0) {
      r2s__debug("RDMA: %s port %u has no GID for the local address", d->name, port);
      return -ENODEV;
    }
  }
  out->dev = d;
  out->port = port;
  out->gid_index = (int)e.gid_index;
  out->gid = e.gid;
  out->lid = pa->lid;
  out->mtu = pa->active_mtu;
  out->roce = pa->link_layer != IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

int r2s__rdma_port_for(const struct sockaddr_storage *local, r2s_rdma_port_t *out)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (r2s__verbs_load() < 0) return -ENOENT;
  pthread_once(&once, register_fork);
  if (r2s__now_ns() < __atomic_load_n(&no_device_until, __ATOMIC_RELAXED)) return -ENODEV;
  char name[sizeof devs->name] = "";
  uint8_t port = 0;
  union ibv_gid gid;
  int rc = cm_resolve(local, name, sizeof name, &port, &gid);
  if (rc == 0 && r2s__opt.device && strcmp(r2s__opt.device, name) != 0) {
    r2s__debug("RDMA: the local address is on %s, not on R2SOCK_DEVICE %s", name, r2s__opt.device);
    rc = -ENODEV;
  }
  /* R2SOCK_GID_INDEX holds whatever the address: without a port that
   * owns it, the first active port of R2SOCK_DEVICE (or of any device). */
  bool any_port = rc < 0 && r2s__opt.gid_index >= 0;
  if (rc < 0 && !any_port) return rc;
  rc = -ENODEV;
  /* With a reference on the device, which keeps it open, and no lock. */
  r2s_rdma_dev_t *d = get_dev(any_port ? r2s__opt.device : name);
  unsigned first = any_port ? 1 : port, last = !d ? 0 : any_port ? d->attr.phys_port_cnt : port;
  for (unsigned p = first; p <= last && rc < 0; p++) {
    struct ibv_port_attr pa;
    if (r2s__verbs_query_port(d->ctx, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
    rc = use_port(d, (uint8_t)p, &pa, &gid, out);
  }
  if (rc < 0 && d) r2s__rdma_dev_put(d); /* else it is the caller's (rdma.h) */
  return rc;
}

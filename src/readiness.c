/* poll/select/epoll over a mix of kernel fds and carried connections. */
#include "readiness.h"
#include "sanitize.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "conn.h"
#include "fdtable.h"
#include "frame.h"
#include "libc.h"
#include "link.h"
#include "options.h"
#include "spin.h"
#include "stats.h"


#define SLICE_MS 100
/* Waits over at most this many carried connections may probe (spin.h). */
#define PROBE_LINKS 4

static int64_t now_ms(void)
{
  return r2s__now_ns() / 1000000;
}

/* A nap (spin.h): the kernel's fds, for at most ns, with no doorbell asked
 * for. */
static int kernel_nap(struct pollfd *fds, nfds_t n, int64_t ns, const sigset_t *mask)
{
  struct timespec ts = r2s__timespec(ns);
  int rc = r2s__libc.ppoll(fds, n, &ts, mask);
  return rc < 0 ? -errno : rc;
}

/* Milliseconds to sleep in the next slice; deadline < 0: forever. */
static int slice(int64_t deadline)
{
  if (deadline < 0) return SLICE_MS;
  int64_t left = deadline - now_ms();
  return left <= 0 ? 0 : left < SLICE_MS ? (int)left : SLICE_MS;
}

static int kernel_poll(struct pollfd *fds, nfds_t n, int ms, const sigset_t *mask)
{
  int rc;
  if (mask) {
    struct timespec ts = r2s__timespec((int64_t)ms * 1000000);
    rc = r2s__libc.ppoll(fds, n, ms < 0 ? NULL : &ts, mask);
  } else {
    rc = r2s__libc.poll(fds, n, ms);
  }
  return rc < 0 ? -errno : rc;
}

/* The carried connection behind fd, with a reference, or NULL. */
static r2s_conn_t *carried(int fd)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  if (c && r2s__conn_passthrough(c)) {
    r2s__conn_put(c);
    c = NULL;
  }
  return c;
}

/* While the receive direction carries frames or ring bytes, a doorbell or
 * the end of the stream arrives as kernel POLLIN, and the link reads it. */
static short kernel_events_for(r2s_conn_t *c, short want, short owned)
{
  short ev = (short)(want & ~owned);
  int rx = r2s__link_rx_state(c->link);
  if (owned && (rx == R2S_RX_RING || rx == R2S_RX_FRAMES)) ev |= POLLIN;
  /* The shim's urgent byte hidden: the peer's replaces it with more bytes
   * (frames, a PLAIN) in front, which wake us to look again. */
  if (owned & POLLPRI) ev |= POLLIN;
  return ev;
}

/* The kernel says readable, but before the peer's switch mark has been
 * read the bytes may be that mark's HANDSHAKE and frames, which are not
 * the application's: an application that reads only after being told
 * "readable" (wrk counts EAGAIN then as a read error) must not be told.
 * The link reads them first; once it carries the receive direction, its
 * answer replaces the kernel's POLLIN. Returns the events to report. */
static short kernel_in(r2s_conn_t *c, int fd, short want, short krev)
{
  int rx = r2s__link_rx_state(c->link);
  if (!(krev & want & POLLIN) || (rx != R2S_RX_PROBE && rx != R2S_RX_PREMARK)) return krev;
  r2s__link_pump(c->link, fd);
  short owned, rev = r2s__link_poll(c->link, fd, POLLIN, &owned);
  if (!(owned & POLLIN)) return krev; /* still in front of the mark: the application's bytes */
  return (short)((krev & ~POLLIN) | (rev & POLLIN));
}

/* POLLPRI is the application's only for its peer's urgent bytes. The peer
 * shim's own (its hello, its switch mark) would wake an application that
 * waits on POLLPRI for urgent data to come (oob_peer.py --sync): it then
 * finds no mark, reads on, and the real urgent byte, arriving later at the
 * position it reads from, is skipped. So while the receive direction is
 * not back on plain TCP, a pending urgent byte that is the shim's is read
 * by the link where it is next (the switch mark and its frames) and not
 * reported. The peer's application byte, sent only once this end passed
 * the switch mark (docs/protocol.md, "Urgent data"), replaces it. */
static bool urgent_is_shims(r2s_conn_t *c, int fd)
{
  r2s_link_t *l = c->link;
  if (!r2s__link_urgent_is_shims(l, fd)) return false;
  r2s__link_pump(l, fd);
  return true;
}

/* Once the links have an answer, the kernel's answer for the other fds is
 * what a system call per wait costs: at 1 KiB per read it is most of the
 * price of a byte (iperf3 keeps its listener in every select). So a wait
 * that the links already answer may reuse this thread's last kernel look at
 * the same set of fds, if it is at most KERNEL_LOOK_NS old: kernel events
 * then show up at most that late, as if they had come that much later,
 * and a wait the links do not answer always asks the kernel. */
#define KERNEL_LOOK_NS 50000

static __thread struct {
  int64_t at;   /* when this thread last asked the kernel (0: never) */
  uint64_t set; /* ... about this set of fds and events (set_of) */
} last_look;

static uint64_t set_of(const struct pollfd *fds, const short *orig, nfds_t n)
{
  uint64_t h = 1469598103934665603ull ^ n; /* FNV-1a over (fd, events) */
  for (nfds_t i = 0; i < n; i++) h = (h ^ ((uint64_t)(uint32_t)fds[i].fd << 16 | (uint16_t)orig[i])) * 1099511628211ull;
  return h;
}

/* May this wait, which the links answer, skip the kernel? If not, the
 * caller asks it and records the look (one clock read either way). */
static bool kernel_look_fresh(uint64_t set)
{
  int64_t now = r2s__now_ns();
  if (last_look.at && last_look.set == set && now - last_look.at < KERNEL_LOOK_NS) return true;
  last_look.at = now, last_look.set = set;
  return false;
}


/* A readiness wait polls the rings (waits_polled). Counted here, not in
 * a blocked read's short way (link/ready.c), which runs once per message: a
 * process-wide counter there would put one cache line shared by every
 * thread on each message's path (stats.h). */
static void count_polled(void)
{
  R2S_STAT_INC(waits_polled);
}

typedef struct poll_look_s {
  r2s_conn_t **cs;
  const short *orig;
  nfds_t n;
} poll_look_t;

static bool poll_rings_ready(void *arg)
{
  const poll_look_t *p = arg;
  for (nfds_t i = 0; i < p->n; i++)
    if (p->cs[i] && r2s__link_poll_ring(p->cs[i]->link, p->orig[i])) return true;
  return false;
}

/* True as soon as a carried connection's ring can serve one of its events,
 * within the longest budget of the set (spin.h). */
static bool spin_rings(r2s_conn_t **cs, const short *orig, nfds_t n)
{
  int64_t budget = 0;
  nfds_t links = 0;
  bool yield_now = false;
  for (nfds_t i = 0; i < n; i++) links += cs[i] != NULL;
  for (nfds_t i = 0; i < n; i++) {
    if (!cs[i]) continue;
    int64_t b = r2s__link_spin_budget(cs[i]->link, orig[i], links <= PROBE_LINKS);
    if (b > budget) budget = b;
    yield_now = yield_now || r2s__link_peer_shares_cpu(cs[i]->link);
  }
  poll_look_t look = {cs, orig, n};
  if (budget > 0) count_polled();
  return r2s__spin_until(poll_rings_ready, &look, budget, yield_now);
}

/* How long a wait over the set that has lasted waited_ns may nap: the
 * shortest nap of its streams' readers (spin.h); 0 if none would. The
 * other links are not asked for doorbells meanwhile: an idle one (the
 * control connection next to iperf3's stream) would cost its peer a
 * wake-up per nap, the very cost napping saves. Their bytes are seen when
 * the nap ends, at most half a stream's mean wait late, and only while a
 * stream flows. */
static int64_t set_nap(r2s_conn_t **cs, const short *orig, const short *own, nfds_t n, int64_t waited_ns)
{
  int64_t nap = 0;
  for (nfds_t i = 0; i < n; i++) {
    if (!cs[i] || !(own[i] & orig[i])) continue;
    int64_t v = r2s__link_nap_ns(cs[i]->link, orig[i], waited_ns);
    if (v > 0 && (!nap || v < nap)) nap = v;
  }
  return nap;
}

/* What a wait that began at `began` (0: none) taught the links of the set:
 * those ready now answered; a wait that timed out (answered false) says
 * all of them were slow. */
static void learn_poll(r2s_conn_t **cs, const struct pollfd *fds, const short *orig, nfds_t n, int64_t began,
                       bool answered)
{
  if (!began) return;
  int64_t waited = r2s__now_ns() - began;
  for (nfds_t i = 0; i < n; i++) {
    if (!cs[i]) continue;
    short ev = (short)((answered ? fds[i].revents & orig[i] : orig[i]) & (POLLIN | POLLOUT));
    if (ev) r2s__link_spin_learn(cs[i]->link, ev, waited, answered);
  }
}

/* Arrays sized by the application's set (poll's nfds, the descriptors a
 * select names) live on the caller's stack up to SMALL_SET entries and on
 * the heap above, never in a variable-length array: the application
 * chooses the size, and a stack array it sizes can run past the thread's
 * stack (a small one, set with pthread_attr_setstacksize) where no error
 * can be returned. Waits are made for every KiB some applications move
 * (iperf3's select): the common small one allocates nothing. */
#define SMALL_SET 32

/* Room for n elements of size bytes: small (small_size bytes) when they
 * fit, else from malloc; NULL when that fails. Released by scratch_free. */
static void *scratch(void *small, size_t small_size, size_t n, size_t size)
{
  if (n <= small_size / size) return small;
  return n > SIZE_MAX / size ? NULL : malloc(n * size);
}

static void scratch_free(void *p, const void *small)
{
  if (p != small) free(p);
}

int r2s__ready_poll(struct pollfd *fds, nfds_t n, int timeout_ms, const sigset_t *mask)
{
  /* Per entry: its carried connection (a reference) or NULL, the events
   * the application asked for, those its link answers, and the link's
   * answer in this round. */
  r2s_conn_t *small_cs[SMALL_SET];
  short small_orig[SMALL_SET], small_own[SMALL_SET], small_lrev[SMALL_SET];
  r2s_conn_t **cs = scratch(small_cs, sizeof small_cs, n, sizeof *cs);
  short *orig = scratch(small_orig, sizeof small_orig, n, sizeof *orig);
  short *own = scratch(small_own, sizeof small_own, n, sizeof *own);
  short *lrev = scratch(small_lrev, sizeof small_lrev, n, sizeof *lrev);
  int rc = -ENOMEM; /* nothing looked at or changed yet: the call can fail whole */
  if (!cs || !orig || !own || !lrev) goto err_free_scratch;
  nfds_t special = 0;
  for (nfds_t i = 0; i < n; i++) {
    cs[i] = fds[i].fd >= 0 ? carried(fds[i].fd) : NULL;
    orig[i] = fds[i].events;
    special += cs[i] != NULL;
  }
  rc = -ENOENT;
  if (!special) goto out;
  int64_t deadline = -2; /* computed when first needed: a ready answer needs no clock */
  int64_t began = 0;     /* when this call started to wait (spin.h) */
  for (;;) {
    /* What the links know, then the kernel's instant answer for the rest. */
    for (nfds_t i = 0; i < n; i++) {
      if (!cs[i]) continue;
      lrev[i] = r2s__link_poll(cs[i]->link, fds[i].fd, orig[i], &own[i]);
      if ((orig[i] & POLLPRI) && urgent_is_shims(cs[i], fds[i].fd)) own[i] |= POLLPRI;
      lrev[i] &= (short)(own[i] & orig[i]) | POLLERR;
      fds[i].events = (short)(orig[i] & ~own[i]);
    }
    /* Ask the kernel only about what the links do not answer (a select
     * over carried connections alone costs no system call). */
    bool kernel_needed = false, links_ready = false;
    for (nfds_t i = 0; i < n && !kernel_needed; i++) kernel_needed = fds[i].events != 0 || !cs[i];
    for (nfds_t i = 0; i < n && !links_ready; i++) links_ready = cs[i] && lrev[i];
    if (kernel_needed && links_ready && kernel_look_fresh(set_of(fds, orig, n))) kernel_needed = false;
    if (kernel_needed) {
      rc = kernel_poll(fds, n, 0, mask);
      if (rc < 0) break;
    } else {
      for (nfds_t i = 0; i < n; i++) fds[i].revents = 0;
    }
    rc = 0;
    for (nfds_t i = 0; i < n; i++) {
      if (cs[i]) fds[i].revents = (short)((kernel_in(cs[i], fds[i].fd, orig[i], fds[i].revents) & ~own[i]) | lrev[i]);
      rc += fds[i].revents != 0;
    }
    if (rc > 0) {
      learn_poll(cs, fds, orig, n, began, true);
      break;
    }
    if (deadline == -2) deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    int ms = slice(deadline);
    if (ms == 0) break;
    /* Nothing yet. A peer running on the other core answers within
     * microseconds: look at the rings for R2SOCK_SPIN_US before paying for
     * a doorbell and a sleep. */
    if (!began) began = r2s__now_ns();
    if (spin_rings(cs, orig, n)) continue;
    /* A stream's reader naps before it asks for doorbells (spin.h). */
    int64_t nap = set_nap(cs, orig, own, n, r2s__now_ns() - began);
    if (nap > 0 && (deadline < 0 || nap < (int64_t)ms * 1000000)) {
      for (nfds_t i = 0; i < n; i++)
        if (cs[i]) fds[i].events = kernel_events_for(cs[i], orig[i], own[i]);
      R2S_STAT_INC(waits_nap);
      rc = kernel_nap(fds, n, nap, mask);
      if (rc < 0) break;
      for (nfds_t i = 0; i < n; i++)
        if (cs[i] && rc > 0 && fds[i].revents) r2s__link_pump_due(cs[i]->link);
      continue;
    }
    /* Still nothing: ask the peers for doorbells, re-check, sleep. */
    bool ready = false;
    for (nfds_t i = 0; i < n && !ready; i++)
      if (cs[i] && (r2s__link_arm(cs[i]->link, fds[i].fd, orig[i]) & orig[i])) ready = true;
    if (!ready) {
      for (nfds_t i = 0; i < n; i++)
        if (cs[i]) fds[i].events = kernel_events_for(cs[i], orig[i], own[i]);
      R2S_STAT_INC(waits_sleep);
      rc = kernel_poll(fds, n, ms, mask);
      if (rc == 0 && ms == SLICE_MS) R2S_STAT_INC(waits_slice_expired);
      if (rc == 0) learn_poll(cs, fds, orig, n, began, false);
    }
    for (nfds_t i = 0; i < n; i++) {
      if (!cs[i]) continue;
      r2s__link_unarm(cs[i]->link, orig[i]);
      if (rc > 0 && fds[i].revents) r2s__link_pump_due(cs[i]->link);
    }
    if (rc < 0) break;
  }
  for (nfds_t i = 0; i < n; i++) fds[i].events = orig[i];
out:
  for (nfds_t i = 0; i < n; i++)
    if (cs[i]) r2s__conn_put(cs[i]);
err_free_scratch:
  scratch_free(lrev, small_lrev);
  scratch_free(own, small_own);
  scratch_free(orig, small_orig);
  scratch_free(cs, small_cs);
  return rc;
}

/* The poll events a select's sets ask for on fd. */
static short select_events(int fd, const fd_set *r, const fd_set *w, const fd_set *e)
{
  return (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) | (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
                 (e && FD_ISSET(fd, e) ? POLLPRI : 0));
}

int r2s__ready_select(int n, fd_set *r, fd_set *w, fd_set *e, int timeout_ms, const sigset_t *mask)
{
  if (n < 0 || n > FD_SETSIZE) return -EINVAL;
  /* r2s__ready_poll finds the carried connections (-ENOENT: none, the
   * sets untouched). One pollfd per descriptor named, not per number
   * below n: a select on one high descriptor needs one. */
  nfds_t k = 0;
  for (int fd = 0; fd < n; fd++) k += select_events(fd, r, w, e) != 0;
  struct pollfd small[SMALL_SET], *p = scratch(small, sizeof small, k, sizeof *p);
  if (!p) return -ENOMEM;
  k = 0;
  for (int fd = 0; fd < n; fd++) {
    short ev = select_events(fd, r, w, e);
    if (ev) p[k++] = (struct pollfd){fd, ev, 0};
  }
  int rc = r2s__ready_poll(p, k, timeout_ms, mask);
  if (rc >= 0) {
    if (r) FD_ZERO(r);
    if (w) FD_ZERO(w);
    if (e) FD_ZERO(e);
    rc = 0;
    for (nfds_t i = 0; i < k; i++) {
      short re = p[i].revents;
      /* select reports errors and hang-ups as readable (and writable). */
      if (re & POLLNVAL) {
        rc = -EBADF;
        break;
      }
      bool rd = (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR));
      bool wr = (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR));
      bool ex = (p[i].events & POLLPRI) && (re & POLLPRI);
      if (rd) FD_SET(p[i].fd, r);
      if (wr) FD_SET(p[i].fd, w);
      if (ex) FD_SET(p[i].fd, e);
      rc += rd + wr + ex;
    }
  }
  scratch_free(p, small);
  return rc;
}

/* ---- epoll ---- */

typedef struct ep_entry_s {
  int fd;
  uint32_t events;
  uint64_t data;
  r2s_conn_t *conn; /* identity check (same_conn): the fd number may have been reused */
  uint32_t conn_id; /* ... and conn's memory, by a newer connection (the pool) */
  bool fired;       /* EPOLLONESHOT reported, until the next MOD */
  unsigned round;   /* the epoll_wait call that last reported it */
  uint8_t et_have;  /* EPOLLET: which of et_gen hold a reported state (bit 0 IN, 1 OUT) */
  uint64_t et_gen[2]; /* EPOLLET: r2s__link_edge_gen when EPOLLIN, EPOLLOUT were last reported */
} ep_entry_t;

/* A connection added (or modified) while another thread already sleeps in
 * the kernel on the set was neither looked at nor armed by that wait: bytes
 * in its ring (there already, or coming later without a doorbell, which
 * only an armed connection gets) would leave the waiter asleep until its
 * timeout. Apache's event MPM re-adds each keep-alive connection from a
 * worker thread while its listener thread waits, and waited out its 5 s
 * keep-alive timeout for requests that sat in the ring. So the set gets a
 * wake-up: one end of a socket pair of the shim's (at 512 and up),
 * registered in the set with a random key as its data, made readable by
 * epoll_ctl while a thread waits on the set, and drained by the waiter,
 * which looks at (and arms) the connections again and never reports it. */
typedef struct ep_wake_s {
  int rd, wr;    /* -1 until first needed */
  ino_t rd_ino, wr_ino;
  uint64_t key;  /* the data of rd's registration in the set */
} ep_wake_t;

typedef struct ep_reg_s {
  pthread_mutex_t lock;
  ep_entry_t *v;
  unsigned n, cap;
  unsigned round; /* counts epoll_wait calls, to report an entry once per call */
  ep_wake_t wake; /* r->lock */
  int waiters;    /* atomic: threads in an epoll wait on the set (r2s__epoll_wait) */
} ep_reg_t;

/* Whether the entry was made for connection c. The kernel drops a closed
 * socket from its epoll sets by itself, with no EPOLL_CTL_DEL (haproxy
 * relies on that), so an entry can outlive its connection: its fd number
 * and the connection's pooled memory may both belong to a newer one,
 * whose events must not be reported with the old registration's data. */
static inline bool same_conn(const ep_entry_t *e, const r2s_conn_t *c)
{
  return c == e->conn && c->id == e->conn_id;
}

/* One slot per possible epoll fd, reserved like the fd table. */
static ep_reg_t **regs;
static pthread_once_t regs_once = PTHREAD_ONCE_INIT;

/* The epoll fds that have a registry, for r2s__epoll_forget (a process has
 * few). sets_lock also keeps a registry from being freed while forget
 * looks at it. Lock order: sets_lock, then a registry's lock. */
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static int *sets;
static unsigned nsets, sets_cap;

/* fork() copies the list whole: never in the middle of a change. */
void r2s__epoll_fork_prepare(void)
{
  pthread_mutex_lock(&sets_lock);
}
void r2s__epoll_fork_done(void)
{
  pthread_mutex_unlock(&sets_lock);
}

static void sets_add(int epfd)
{
  pthread_mutex_lock(&sets_lock);
  if (nsets == sets_cap) {
    unsigned cap = sets_cap ? sets_cap * 2 : 8;
    int *v = realloc(sets, cap * sizeof *v);
    if (v) sets = v, sets_cap = cap;
  }
  /* Out of memory: the set is not looked at by forget, as before it. */
  if (nsets < sets_cap) sets[nsets++] = epfd;
  pthread_mutex_unlock(&sets_lock);
}

static void regs_init(void)
{
  size_t len = (size_t)r2s__fd_cap * sizeof *regs;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  __atomic_store_n(&regs, p == MAP_FAILED ? NULL : (ep_reg_t **)p, __ATOMIC_RELEASE);
  if (regs) R2S_LSAN_ROOT(p, len);
}

static ep_reg_t *reg_of(int epfd, bool create)
{
  pthread_once(&regs_once, regs_init);
  if (!regs || epfd < 0 || (unsigned)epfd >= r2s__fd_cap) return NULL;
  ep_reg_t *r = __atomic_load_n(&regs[epfd], __ATOMIC_ACQUIRE);
  if (r || !create) return r;
  r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->lock, NULL);
  r->wake.rd = r->wake.wr = -1;
  ep_reg_t *expected = NULL;
  if (!__atomic_compare_exchange_n(&regs[epfd], &expected, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    free(r);
    r = expected;
  } else {
    sets_add(epfd);
  }
  return r;
}

/* ---- the set's wake-up (ep_wake_t) ---- */

static void wake_close(ep_wake_t *w)
{
  /* A number the application took back (closefrom, then a file of its
   * own) is no longer ours: forgotten, never closed. */
  if (w->rd >= 0 && r2s__still_sock(w->rd, w->rd_ino)) r2s__libc.close(w->rd);
  if (w->wr >= 0 && r2s__still_sock(w->wr, w->wr_ino)) r2s__libc.close(w->wr);
  w->rd = w->wr = -1;
}

/* The set's wake-up, made and registered in epfd on first use; false if
 * it cannot be had (the wait then ends with its slice). r->lock held. */
static bool wake_ready(ep_reg_t *r, int epfd)
{
  ep_wake_t *w = &r->wake;
  if (w->rd >= 0 && r2s__still_sock(w->rd, w->rd_ino) && r2s__still_sock(w->wr, w->wr_ino)) return true;
  wake_close(w);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) return false;
  /* Kept at numbers of the shim's (libc.h); the originals go. */
  int wr = r2s__keep_fd(sv[1], &w->wr_ino), rd = r2s__keep_fd(sv[0], &w->rd_ino);
  r2s__libc.close(sv[0]);
  r2s__libc.close(sv[1]);
  uint64_t key;
  if (getrandom(&key, sizeof key, GRND_NONBLOCK) != (ssize_t)sizeof key)
    key = (uint64_t)r2s__now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)r;
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key};
  if (rd < 0 || wr < 0 || r2s__libc.epoll_ctl(epfd, EPOLL_CTL_ADD, rd, &ev) < 0) {
    if (rd >= 0) r2s__libc.close(rd);
    if (wr >= 0) r2s__libc.close(wr);
    return false;
  }
  w->rd = rd, w->wr = wr, w->key = key;
  return true;
}

/* Wakes the threads asleep on epfd: they look at the carried connections
 * again. A nonblocking send: it never waits under r->lock. */
static void wake_waiters(ep_reg_t *r, int epfd)
{
  pthread_mutex_lock(&r->lock);
  if (wake_ready(r, epfd)) {
    char b = 1;
    (void)r2s__libc.send(r->wake.wr, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  pthread_mutex_unlock(&r->lock);
}

/* Whether ev is the set's wake-up; if so, it is drained. r->lock held. */
static bool is_wake(ep_reg_t *r, const struct epoll_event *ev)
{
  if (r->wake.rd < 0 || ev->data.u64 != r->wake.key) return false;
  char buf[64];
  if (r2s__still_sock(r->wake.rd, r->wake.rd_ino))
    while (r2s__libc.recv(r->wake.rd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
  return true;
}

/* The kernel's events for epfd less the set's wake-up (a wait that was
 * not the shim's when it began can still be woken by it). */
static int drop_wakes(ep_reg_t *r, struct epoll_event *ev, int n)
{
  int out = 0;
  pthread_mutex_lock(&r->lock);
  for (int j = 0; j < n; j++)
    if (!is_wake(r, &ev[j])) ev[out++] = ev[j];
  pthread_mutex_unlock(&r->lock);
  return out;
}

void r2s__epoll_closed(int fd)
{
  if (!__atomic_load_n(&regs, __ATOMIC_ACQUIRE) || fd < 0 || (unsigned)fd >= r2s__fd_cap ||
      !__atomic_load_n(&regs[fd], __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&sets_lock);
  ep_reg_t *r = __atomic_exchange_n(&regs[fd], NULL, __ATOMIC_ACQ_REL);
  for (unsigned i = 0; r && i < nsets; i++)
    if (sets[i] == fd) sets[i--] = sets[--nsets];
  pthread_mutex_unlock(&sets_lock);
  if (!r) return;
  /* A wait still running on this epoll fd in another thread would be the
   * application's own use-after-close; the registry goes with the fd. */
  wake_close(&r->wake);
  pthread_mutex_destroy(&r->lock);
  free(r->v);
  free(r);
}

/* The kernel drops a socket from the epoll sets it is in once its last
 * descriptor closes, and an application that closes without
 * EPOLL_CTL_DEL (haproxy) relies on that. A carried connection's socket
 * outlives the application's close in a descriptor of the shim's (the
 * reaper's, an RDMA transport's), and with it the registrations: its
 * events (the peer's end, above all) would be reported under the old
 * number, to whatever connection the application has there now. So the
 * application's last close of a connection takes it out of every set the
 * shim saw it added to, first. */
void r2s__epoll_forget(int fd, r2s_conn_t *c)
{
  if (!(r2s__conn_flags(c) & R2S_CONN_EPOLLED)) return;
  pthread_mutex_lock(&sets_lock);
  for (unsigned k = 0; k < nsets; k++) {
    ep_reg_t *r = __atomic_load_n(&regs[sets[k]], __ATOMIC_ACQUIRE);
    if (!r) continue;
    pthread_mutex_lock(&r->lock);
    for (unsigned i = 0; i < r->n; i++) {
      if (r->v[i].fd != fd || !same_conn(&r->v[i], c)) continue;
      (void)r2s__libc.epoll_ctl(sets[k], EPOLL_CTL_DEL, fd, NULL);
      r->v[i] = r->v[--r->n];
      break;
    }
    pthread_mutex_unlock(&r->lock);
  }
  pthread_mutex_unlock(&sets_lock);
}

void r2s__epoll_created(int epfd)
{
  /* A new epoll fd may reuse the number of a closed one: forget it. */
  ep_reg_t *r = reg_of(epfd, false);
  if (!r) return;
  pthread_mutex_lock(&r->lock);
  r->n = 0;
  wake_close(&r->wake); /* registered in the old set, not in this one */
  pthread_mutex_unlock(&r->lock);
}

void r2s__epoll_ctl_shadow(int epfd, int op, int fd, const struct epoll_event *ev)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  ep_reg_t *r = reg_of(epfd, c != NULL && op == EPOLL_CTL_ADD);
  if (r) {
    pthread_mutex_lock(&r->lock);
    unsigned i = 0;
    while (i < r->n && r->v[i].fd != fd) i++;
    if (op == EPOLL_CTL_DEL) {
      if (i < r->n) r->v[i] = r->v[--r->n];
    } else if (c && ev) {
      if (i == r->n && op == EPOLL_CTL_ADD) {
        if (r->n == r->cap) {
          unsigned cap = r->cap ? r->cap * 2 : 16;
          ep_entry_t *v = realloc(r->v, cap * sizeof *v);
          if (v) r->v = v, r->cap = cap;
        }
        if (r->n < r->cap)
          r->n++;
        else
          i = r->n; /* out of memory: the kernel's answer stands for it */
      }
      if (i < r->n) r->v[i] = (ep_entry_t){.fd = fd, .events = ev->events, .data = ev->data.u64, .conn = c, .conn_id = c->id};
      if (i < r->n) r2s__conn_set_flag(c, R2S_CONN_EPOLLED, true);
    }
    pthread_mutex_unlock(&r->lock);
  }
  /* A waiter must look at the connection again where the link, not the
   * kernel, answers for it (see ep_wake_t). */
  if (r && c && ev && op != EPOLL_CTL_DEL && !r2s__conn_passthrough(c) &&
      __atomic_load_n(&r->waiters, __ATOMIC_ACQUIRE) > 0) {
    r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
    short want = (short)(ev->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
    if (l) (void)r2s__link_poll(l, fd, want, &owned);
    if (l && (owned & want)) wake_waiters(r, epfd);
  }
  if (c) r2s__conn_put(c);
}

/* EPOLLET (readiness.h): of the bits the link owns and reports ready, one
 * is reported again only once its side of the ring moved since this entry
 * last reported it (new bytes or the end of the stream; room the peer
 * freed), as the kernel reports a socket's edges. Level-triggered, an idle
 * connection with room in its ring made every epoll_wait of an
 * EPOLLIN|EPOLLOUT|EPOLLET registration (nginx's) return at once: a
 * thread at full CPU. Where the link cannot tell, the bit stays
 * level-triggered: an extra event is harmless, a lost one is not. r->lock
 * held. */
static uint32_t edges_only(ep_entry_t *e, r2s_link_t *l, uint32_t got, short owned)
{
  static const short bits[2] = {POLLIN, POLLOUT};
  if (!(e->events & EPOLLET) || (got & EPOLLERR)) return got;
  for (int i = 0; i < 2; i++) {
    uint64_t gen;
    if (!(got & (uint32_t)bits[i]) || !(owned & bits[i])) continue;
    if (!r2s__link_edge_gen(l, bits[i], &gen)) {
      e->et_have &= (uint8_t) ~(1u << i);
    } else if ((e->et_have & (1u << i)) && gen == e->et_gen[i]) {
      got &= ~(uint32_t)bits[i];
    } else {
      e->et_gen[i] = gen;
      e->et_have |= (uint8_t)(1u << i);
    }
  }
  return got;
}

/* Readiness of the carried connections registered in r, up to max events;
 * -ENOENT if none of its registrations is a carried connection. A wait
 * that began at `began` (0: none) ends for the links found ready. */
static int collect(ep_reg_t *r, struct epoll_event *out, int max, bool arm, int64_t began)
{
  int k = 0;
  bool any = false;
  pthread_mutex_lock(&r->lock);
  for (unsigned i = 0; i < r->n && k < max; i++) {
    ep_entry_t *e = &r->v[i];
    if (e->fired) continue;
    r2s_conn_t *c = carried(e->fd);
    if (!c) continue;
    if (same_conn(e, c)) {
      any = true;
      short want = (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
      short rev = arm ? r2s__link_arm(c->link, e->fd, want) : r2s__link_poll(c->link, e->fd, want, &owned);
      if (!arm) rev &= (short)(owned | POLLERR);
      if (arm) owned = rev; /* r2s__link_arm answers for owned bits only */
      uint32_t got = edges_only(e, c->link, (uint32_t)rev & (e->events | EPOLLERR | EPOLLHUP), owned);
      if (got & (EPOLLIN | EPOLLOUT | EPOLLERR)) {
        if (began)
          r2s__link_spin_learn(c->link, (short)(got & (EPOLLIN | EPOLLOUT)), r2s__now_ns() - began, true);
        out[k++] = (struct epoll_event){.events = got, .data.u64 = e->data};
        e->round = r->round;
        if (e->events & EPOLLONESHOT) e->fired = true;
      }
    }
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
  return any || k ? k : -ENOENT;
}

static void unarm_all(ep_reg_t *r)
{
  pthread_mutex_lock(&r->lock);
  for (unsigned i = 0; i < r->n; i++) {
    r2s_conn_t *c = carried(r->v[i].fd);
    if (!c) continue;
    if (same_conn(&r->v[i], c)) r2s__link_unarm(c->link, (short)(r->v[i].events & (EPOLLIN | EPOLLOUT)));
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
}

/* An entry already reported in this call (from its link's answer, in
 * done[0..ndone)) gets the kernel's bits that the link does not own added
 * to that report, not a second one. Dropping them lost an edge: with
 * EPOLLET the kernel reports EPOLLOUT once, and an exec'd server whose
 * link kept reporting EPOLLIN (the peer's end) never learnt that it could
 * write again (the progs fork-exec stall). */
static void merge_reported(r2s_conn_t *c, const ep_entry_t *e, uint32_t events, struct epoll_event *done,
                           int ndone)
{
  short owned;
  (void)r2s__link_poll(c->link, e->fd, (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), &owned);
  uint32_t extra = events & ~(uint32_t)owned & (e->events | EPOLLERR | EPOLLHUP) & ~(uint32_t)(EPOLLET | EPOLLONESHOT);
  for (int m = 0; m < ndone && extra; m++)
    if (done[m].data.u64 == e->data) done[m].events |= extra;
}

/* Kernel events on a carried connection: for the bits the link owns the
 * kernel saw doorbells or frames, so the link's answer replaces them; the
 * other bits stand. An entry already reported in this call is not
 * reported twice (see merge_reported). A wait that began at `began` (0:
 * none) ends for the links found ready, as in collect(). */
static int filter(ep_reg_t *r, struct epoll_event *done, int ndone, struct epoll_event *ev, int k,
                  int64_t began)
{
  int out = 0;
  pthread_mutex_lock(&r->lock);
  for (int j = 0; j < k; j++) {
    uint32_t events = ev[j].events;
    if (is_wake(r, &ev[j])) continue;
    for (unsigned i = 0; i < r->n; i++) {
      ep_entry_t *e = &r->v[i];
      if (e->data != ev[j].data.u64) continue;
      r2s_conn_t *c = carried(e->fd);
      if (!c) break;
      if (same_conn(e, c)) {
        if (e->round == r->round) {
          merge_reported(c, e, events, done, ndone);
          events = 0;
        } else {
          short want = (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
          r2s__link_pump_due(c->link); /* the kernel saw bytes: frames to read */
          short rev = r2s__link_poll(c->link, e->fd, want, &owned);
          events = (events & ~(uint32_t)owned) |
                   edges_only(e, c->link, (uint32_t)(rev & owned) & e->events, owned);
          if (!(owned & POLLIN)) events = (uint32_t)(uint16_t)kernel_in(c, e->fd, want, (short)events) | (events & ~0xffffu);
          if ((events & EPOLLPRI) && urgent_is_shims(c, e->fd)) events &= ~(uint32_t)EPOLLPRI;
          if (events) e->round = r->round;
          if (began && (rev & owned & (POLLIN | POLLOUT)))
            r2s__link_spin_learn(c->link, (short)(rev & owned & (POLLIN | POLLOUT)), r2s__now_ns() - began,
                                 true);
        }
      }
      r2s__conn_put(c);
      break;
    }
    if (events & ~(uint32_t)(EPOLLET | EPOLLONESHOT)) {
      ev[j].events = events;
      ev[out++] = ev[j];
    }
  }
  pthread_mutex_unlock(&r->lock);
  return out;
}

static int kernel_epoll(int epfd, struct epoll_event *ev, int max, int ms, const sigset_t *mask)
{
  int rc = mask ? r2s__libc.epoll_pwait(epfd, ev, max, ms, mask) : r2s__libc.epoll_wait(epfd, ev, max, ms);
  return rc < 0 ? -errno : rc;
}

/* A nap (spin.h) on the kernel's epoll set, for at most ns: to the
 * nanosecond where the C library has epoll_pwait2, else in whole ms. */
static int kernel_epoll_nap(int epfd, struct epoll_event *ev, int max, int64_t ns, const sigset_t *mask)
{
  if (r2s__libc.epoll_pwait2) {
    struct timespec ts = r2s__timespec(ns);
    int rc = r2s__libc.epoll_pwait2(epfd, ev, max, &ts, mask);
    if (rc >= 0 || errno != ENOSYS) return rc < 0 ? -errno : rc;
  }
  return kernel_epoll(epfd, ev, max, (int)((ns + 999999) / 1000000), mask);
}

/* The shortest nap of the stream readers registered in r (set_nap says
 * why the others are not asked for doorbells meanwhile); 0: none. */
static int64_t reg_nap(ep_reg_t *r, int64_t waited_ns)
{
  int64_t nap = 0;
  pthread_mutex_lock(&r->lock);
  for (unsigned i = 0; i < r->n; i++) {
    ep_entry_t *e = &r->v[i];
    if (e->fired) continue;
    r2s_conn_t *c = carried(e->fd);
    if (!c) continue;
    if (same_conn(e, c)) {
      int64_t v = r2s__link_nap_ns(c->link, (short)(e->events & (EPOLLIN | EPOLLOUT)), waited_ns);
      if (v > 0 && (!nap || v < nap)) nap = v;
    }
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
  return nap;
}

typedef struct ep_look_s {
  ep_reg_t *r;
  int64_t budget; /* the longest of the carried entries' budgets */
  bool yield_now; /* a carried entry's peer last ran on this CPU */
  bool may_probe; /* a few carried entries only (spin.h) */
} ep_look_t;

/* Whether a carried entry's ring can serve it now; with budget_only, only
 * computes look->budget. */
static bool ep_scan(ep_look_t *look, bool budget_only)
{
  ep_reg_t *r = look->r;
  bool ready = false;
  pthread_mutex_lock(&r->lock);
  for (unsigned i = 0; i < r->n && !ready; i++) {
    ep_entry_t *e = &r->v[i];
    if (e->fired) continue;
    r2s_conn_t *c = carried(e->fd);
    if (!c) continue;
    if (same_conn(e, c)) {
      short want = (short)(e->events & (EPOLLIN | EPOLLOUT));
      if (budget_only) {
        int64_t b = r2s__link_spin_budget(c->link, want, look->may_probe);
        if (b > look->budget) look->budget = b;
        look->yield_now = look->yield_now || r2s__link_peer_shares_cpu(c->link);
      } else {
        ready = r2s__link_poll_ring(c->link, want) != 0;
      }
    }
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
  return ready;
}

static bool ep_ready(void *arg)
{
  return ep_scan(arg, false);
}

/* Polls the carried entries' rings before the wait sleeps (spin.h). */
static bool spin_entries(ep_reg_t *r)
{
  unsigned links = 0;
  pthread_mutex_lock(&r->lock);
  for (unsigned i = 0; i < r->n && links <= PROBE_LINKS; i++) {
    r2s_conn_t *c = r->v[i].fired ? NULL : carried(r->v[i].fd);
    if (!c) continue;
    links += same_conn(&r->v[i], c);
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
  ep_look_t look = {r, 0, false, links <= PROBE_LINKS};
  (void)ep_scan(&look, true);
  if (look.budget > 0) count_polled();
  return r2s__spin_until(ep_ready, &look, look.budget, look.yield_now);
}

int r2s__ready_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask)
{
  ep_reg_t *r = reg_of(epfd, false);
  if (!r || max <= 0) return -ENOENT;
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  int64_t began = 0; /* when this call started to wait (spin.h) */
  for (;;) {
    pthread_mutex_lock(&r->lock);
    r->round++;
    pthread_mutex_unlock(&r->lock);
    int k = collect(r, ev, max, false, began);
    if (k < 0) return k; /* nothing of ours in this set: the kernel alone */
    if (k > 0) {
      int more = kernel_epoll(epfd, ev + k, max - k, 0, mask);
      return more < 0 ? k : k + filter(r, ev, k, ev + k, more, began);
    }
    int ms = slice(deadline);
    if (ms && !began) {
      /* Nothing yet: a peer that answers soon costs less to wait for than
       * a doorbell and a sleep. The kernel's fds are not looked at while
       * polling; the budget bounds what that delays them. */
      began = r2s__now_ns();
      if (spin_entries(r)) continue;
    }
    /* A stream's reader naps before it asks for doorbells (spin.h). */
    int64_t nap = ms ? reg_nap(r, r2s__now_ns() - began) : 0;
    if (nap > 0 && (deadline < 0 || nap < (int64_t)ms * 1000000)) {
      R2S_STAT_INC(waits_nap);
      int n = kernel_epoll_nap(epfd, ev, max, nap, mask);
      if (n < 0) return n;
      n = filter(r, ev, 0, ev, n, began);
      if (n > 0) return n;
      continue;
    }
    k = collect(r, ev, max, true, began); /* arms, and catches what raced in */
    if (k < 0) return k;
    if (k > 0) {
      unarm_all(r);
      int more = kernel_epoll(epfd, ev + k, max - k, 0, mask);
      return more < 0 ? k : k + filter(r, ev, k, ev + k, more, began);
    }
    R2S_STAT_INC(waits_sleep);
    int n = kernel_epoll(epfd, ev, max, ms, mask);
    unarm_all(r);
    if (n < 0) return n;
    if (n == 0 && ms == SLICE_MS) R2S_STAT_INC(waits_slice_expired);
    n = filter(r, ev, 0, ev, n, began);
    if (n > 0) return n;
    /* Only doorbells (or nothing): look at the links again, unless the
     * time is up. */
    if (ms == 0) {
      k = collect(r, ev, max, false, began);
      return k < 0 ? 0 : k;
    }
  }
}

static int epoll_wait_counted(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                              const struct timespec *exact, bool may_shim);

int r2s__epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                    const struct timespec *exact, bool may_shim)
{
  /* Counted as a waiter on the set while the process carries connections
   * (the registry is made for it): one of them added meanwhile wakes it
   * (ep_wake_t). Before any is carried, none can have bytes in a ring. */
  ep_reg_t *r = may_shim && __atomic_load_n(&r2s__links_active, __ATOMIC_RELAXED) ? reg_of(epfd, true) : NULL;
  if (r) __atomic_add_fetch(&r->waiters, 1, __ATOMIC_ACQ_REL);
  int rc = epoll_wait_counted(epfd, ev, max, timeout_ms, mask, exact, may_shim);
  if (r) __atomic_sub_fetch(&r->waiters, 1, __ATOMIC_ACQ_REL);
  return rc;
}

static int epoll_wait_counted(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                              const struct timespec *exact, bool may_shim)
{
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  for (bool first = true;; first = false) {
    int ms = timeout_ms;
    if (!first && deadline >= 0) {
      int64_t left = deadline - now_ms();
      ms = left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
    }
    int rc = -ENOENT;
    if (may_shim && __atomic_load_n(&r2s__links_active, __ATOMIC_RELAXED) != 0)
      rc = r2s__ready_epoll_wait(epfd, ev, max, ms, mask);
    if (rc != -ENOENT) return rc;
    if (first && exact) {
      if (!r2s__libc.epoll_pwait2) return -ENOSYS;
      rc = r2s__libc.epoll_pwait2(epfd, ev, max, exact, mask);
      if (rc < 0) rc = -errno;
    } else {
      rc = kernel_epoll(epfd, ev, max, ms, mask);
    }
    ep_reg_t *r = rc > 0 ? reg_of(epfd, false) : NULL;
    if (!r) return rc;
    int n = drop_wakes(r, ev, rc);
    /* Only the wake-up: a connection became ready meanwhile. */
    if (n > 0 || ms == 0) return n;
  }
}

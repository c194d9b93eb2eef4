/* poll and select over a mix of kernel fds and carried connections: the
 * links answer what they own, the kernel the rest, and the wait engine
 * (wait.h) waits while nobody answers (readiness.h). */
#include "readiness.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "conn.h"
#include "link.h"
#include "ready_conn.h"
#include "wait.h"

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
  for (nfds_t i = 0; i < n; i++)
    h = (h ^ ((uint64_t)(uint32_t)fds[i].fd << 16 | (uint16_t)orig[i])) * 1099511628211ull;
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

/* What a wait that has lasted waited_ns (0: none) taught the links of the
 * set: those ready now answered; a wait whose slice ran out (answered
 * false) says all of them were slow. */
static void learn_poll(r2s_conn_t **cs, const struct pollfd *fds, const short *orig, nfds_t n, int64_t waited,
                       bool answered)
{
  if (!waited) return;
  for (nfds_t i = 0; i < n; i++) {
    if (!cs[i]) continue;
    short ev = (short)((answered ? fds[i].revents & orig[i] : orig[i]) & (POLLIN | POLLOUT));
    if (ev) r2s__link_spin_learn(cs[i]->link, ev, waited, answered);
  }
}

/* A poll's wait (wait.h); w first, as the hooks get it. Per entry: its
 * carried connection (a reference) or NULL, the events the application
 * asked for, and those its link answered at the last look. */
typedef struct poll_wait_s {
  r2s_wait_t w;
  r2s_conn_t **cs;
  const short *orig, *own;
  nfds_t armed; /* the links of fds[0..armed) were armed: only those are unarmed */
} poll_wait_t;

static void each_link(r2s_wait_t *w, r2s_wait_visit_t fn, void *arg)
{
  poll_wait_t *p = (poll_wait_t *)w;
  for (nfds_t i = 0; i < w->nfds; i++)
    if (p->cs[i] && fn(arg, p->cs[i]->link, p->orig[i], p->own[i])) return;
}

static bool arm(r2s_wait_t *w)
{
  poll_wait_t *p = (poll_wait_t *)w;
  for (p->armed = 0; p->armed < w->nfds;) {
    nfds_t i = p->armed++;
    if (p->cs[i] && (r2s__link_arm(p->cs[i]->link, w->fds[i].fd, p->orig[i]) & p->orig[i])) return true;
  }
  return false;
}

static void unarm(r2s_wait_t *w)
{
  poll_wait_t *p = (poll_wait_t *)w;
  for (nfds_t i = 0; i < p->armed; i++)
    if (p->cs[i]) r2s__link_unarm(p->cs[i]->link, p->orig[i]);
  p->armed = 0;
}

static void to_kernel(r2s_wait_t *w, bool nap)
{
  (void)nap;
  poll_wait_t *p = (poll_wait_t *)w;
  for (nfds_t i = 0; i < w->nfds; i++)
    if (p->cs[i]) w->fds[i].events = kernel_events_for(p->cs[i], p->orig[i], p->own[i]);
}

/* Woken: the links whose socket the kernel reported have frames to read
 * (a doorbell, the end); a slice that ran out taught them all. */
static int woke(r2s_wait_t *w, r2s_wait_woke_t how, int rc, int ms)
{
  (void)ms;
  poll_wait_t *p = (poll_wait_t *)w;
  if (how == R2S_WAIT_SLEPT && rc == 0)
    learn_poll(p->cs, w->fds, p->orig, w->nfds, r2s__wait_waited(w), false);
  for (nfds_t i = 0; i < w->nfds; i++)
    if (p->cs[i] && rc > 0 && w->fds[i].revents) r2s__link_pump(p->cs[i]->link, -1);
  return rc < 0 ? rc : 0;
}

static const r2s_wait_ops_t poll_ops = {each_link, NULL, NULL, arm, unarm, to_kernel, woke};

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
    cs[i] = fds[i].fd >= 0 ? r2s__ready_carried(fds[i].fd) : NULL;
    orig[i] = fds[i].events;
    special += cs[i] != NULL;
  }
  rc = -ENOENT;
  if (!special) goto out;
  poll_wait_t pw = {{.ops = &poll_ops, .fds = fds, .nfds = n, .epfd = -1, .mask = mask}, cs, orig, own, 0};
  bool timed = false; /* the deadline is computed when first needed: a ready answer needs no clock */
  for (;;) {
    /* What the links know, then the kernel's instant answer for the rest. */
    for (nfds_t i = 0; i < n; i++) {
      if (!cs[i]) continue;
      lrev[i] = r2s__link_poll(cs[i]->link, fds[i].fd, orig[i], &own[i]);
      if ((orig[i] & POLLPRI) && r2s__ready_urgent_hidden(cs[i], fds[i].fd)) own[i] |= POLLPRI;
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
      rc = r2s__wait_kernel_poll(fds, n, 0, mask);
      if (rc < 0) break;
    } else {
      for (nfds_t i = 0; i < n; i++) fds[i].revents = 0;
    }
    rc = 0;
    for (nfds_t i = 0; i < n; i++) {
      if (cs[i])
        fds[i].revents =
            (short)((r2s__ready_kernel_in(cs[i], fds[i].fd, orig[i], fds[i].revents) & ~own[i]) | lrev[i]);
      rc += fds[i].revents != 0;
    }
    if (rc > 0) {
      learn_poll(cs, fds, orig, n, r2s__wait_waited(&pw.w), true);
      break;
    }
    if (!timed) pw.w.deadline = r2s__wait_deadline_ms(timeout_ms), timed = true;
    rc = r2s__wait_round(&pw.w);
    if (rc == -ETIMEDOUT) {
      rc = 0; /* nothing ready in time */
      break;
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

/* The wait engine (wait.h): spin, nap, arm, sleep a slice, unarm. */
#include "wait.h"

#include <errno.h>
#include <stdint.h>

#include "clock.h"
#include "libc.h"
#include "spin.h"
#include "stats.h"

/* Waits over at most this many carried connections may probe (spin.h). */
#define WAIT_PROBE_LINKS 4

int64_t r2s__wait_deadline_ms(int timeout_ms)
{
  return timeout_ms < 0 ? 0 : (r2s__now_ns() / 1000000 + timeout_ms) * 1000000;
}

int64_t r2s__wait_waited(const r2s_wait_t *w)
{
  return w->began ? r2s__now_ns() - w->began : 0;
}

int r2s__wait_kernel_poll(struct pollfd *fds, nfds_t n, int ms, const sigset_t *mask)
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

int r2s__wait_kernel_epoll(int epfd, struct epoll_event *ev, int max, int ms, const sigset_t *mask)
{
  int rc = mask ? r2s__libc.epoll_pwait(epfd, ev, max, ms, mask) : r2s__libc.epoll_wait(epfd, ev, max, ms);
  return rc < 0 ? -errno : rc;
}

/* A nap in the kernel for at most ns, with no doorbell asked for: to the
 * nanosecond by ppoll, or epoll_pwait2 where the C library has it (else
 * in whole ms). */
static int kernel_nap(r2s_wait_t *w, int64_t ns)
{
  struct timespec ts = r2s__timespec(ns);
  int rc;
  if (w->epfd < 0) {
    rc = r2s__libc.ppoll(w->fds, w->nfds, &ts, w->mask);
    return rc < 0 ? -errno : rc;
  }
  if (r2s__libc.epoll_pwait2) {
    rc = r2s__libc.epoll_pwait2(w->epfd, w->ev, w->max, &ts, w->mask);
    if (rc >= 0 || errno != ENOSYS) return rc < 0 ? -errno : rc;
  }
  return r2s__wait_kernel_epoll(w->epfd, w->ev, w->max, (int)((ns + 999999) / 1000000), w->mask);
}

static int kernel_sleep(r2s_wait_t *w, int ms)
{
  if (w->epfd >= 0) return r2s__wait_kernel_epoll(w->epfd, w->ev, w->max, ms, w->mask);
  return r2s__wait_kernel_poll(w->fds, w->nfds, ms, w->mask);
}

/* Milliseconds of the next slice, rounded up to reach the deadline; 0:
 * the deadline has passed. */
static int slice(const r2s_wait_t *w)
{
  int cap = w->cap_ms > 0 && w->cap_ms < R2S_WAIT_SLICE_MS ? w->cap_ms : R2S_WAIT_SLICE_MS;
  if (!w->deadline) return cap;
  int64_t left = w->deadline - r2s__now_ns();
  if (left <= 0) return 0;
  left = (left + 999999) / 1000000;
  return left < cap ? (int)left : cap;
}

/* Milliseconds to the deadline, rounded up (at least 1: a sleep without
 * a slice is chosen only while time is left); -1: none. */
static int until_deadline(const r2s_wait_t *w)
{
  if (!w->deadline) return -1;
  int64_t left = (w->deadline - r2s__now_ns() + 999999) / 1000000;
  return left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
}

typedef struct spin_fold_s {
  unsigned links;
  bool may_probe, yield_now;
  int64_t budget, nap, waited;
} spin_fold_t;

static bool count_link(void *arg, r2s_link_t *l, short events, short owned)
{
  (void)l, (void)events, (void)owned;
  spin_fold_t *f = arg;
  return ++f->links > WAIT_PROBE_LINKS;
}

static bool fold_budget(void *arg, r2s_link_t *l, short events, short owned)
{
  (void)owned;
  spin_fold_t *f = arg;
  int64_t b = r2s__link_spin_budget(l, events, f->may_probe, &f->yield_now);
  if (b > f->budget) f->budget = b;
  return false;
}

/* The spin's look by default: a ring that answers ends the walk. */
static bool ring_answers(void *arg, r2s_link_t *l, short events, short owned)
{
  (void)owned;
  bool *ready = arg;
  return *ready = r2s__link_poll(l, -1, events, NULL) != 0;
}

static bool ring_look(void *arg)
{
  r2s_wait_t *w = arg;
  bool ready = false;
  w->ops->each(w, ring_answers, &ready);
  return ready;
}

/* The shortest nap of the set's streams' readers (spin.h); 0 if none
 * would. The other links are not asked for doorbells meanwhile: an idle
 * one (the control connection next to iperf3's stream) would cost its peer
 * a wake-up per nap, the very cost napping saves. Their bytes are seen
 * when the nap ends, at most half a stream's mean wait late, and only
 * while a stream flows. */
static bool fold_nap(void *arg, r2s_link_t *l, short events, short owned)
{
  spin_fold_t *f = arg;
  if (!(owned & events)) return false;
  int64_t v = r2s__link_nap_ns(l, events, f->waited);
  if (v > 0 && (!f->nap || v < f->nap)) f->nap = v;
  return false;
}

/* Nothing yet: a peer running on the other core answers within
 * microseconds, sooner than a doorbell and a sleep would (spin.h). True
 * when a ring answered within the longest budget of the set. */
static bool spin(r2s_wait_t *w)
{
  spin_fold_t f = {0};
  w->ops->each(w, count_link, &f);
  f.may_probe = f.links <= WAIT_PROBE_LINKS;
  w->ops->each(w, fold_budget, &f);
  if (f.budget > 0 && !w->stream) R2S_STAT_INC(waits_polled);
  return r2s__spin_until(w->ops->ring ? w->ops->ring : ring_look, w, f.budget, f.yield_now);
}

int r2s__wait_round(r2s_wait_t *w)
{
  const r2s_wait_ops_t *o = w->ops;
  int ms = slice(w);
  if (!ms && !w->kernel_in_sleep) return -ETIMEDOUT;
  if (ms) {
    bool first = !w->began, polled = w->polled;
    if (first) w->began = r2s__now_ns();
    w->polled = false;
    if ((first || !w->kernel_in_sleep) && !polled && spin(w) && (!o->spun || o->spun(w))) return 0;
    /* A stream's reader naps before it asks for doorbells (spin.h).
     * Doorbells and the end of the stream still wake the nap. */
    spin_fold_t f = {.waited = r2s__now_ns() - w->began};
    o->each(w, fold_nap, &f);
    if (f.nap > 0 && (!w->deadline || f.nap < w->deadline - r2s__now_ns())) {
      if (o->to_kernel) o->to_kernel(w, true);
      R2S_STAT_INC(waits_nap);
      return o->woke(w, R2S_WAIT_NAPPED, kernel_nap(w, f.nap), 0);
    }
  }
  /* Still nothing: ask the peers for doorbells, re-check, sleep. */
  w->unsliced = false;
  if (o->arm(w)) {
    o->unarm(w);
    return o->woke(w, R2S_WAIT_ARMED_READY, 0, ms);
  }
  if (o->to_kernel) o->to_kernel(w, false);
  R2S_STAT_INC(waits_sleep);
  bool sliced = !w->unsliced || !ms;
  if (!sliced) ms = until_deadline(w);
  int rc = kernel_sleep(w, ms);
  if (rc == 0 && sliced && ms == R2S_WAIT_SLICE_MS) R2S_STAT_INC(waits_slice_expired);
  if (!sliced) R2S_STAT_INC(waits_unsliced);
  o->unarm(w);
  return o->woke(w, R2S_WAIT_SLEPT, rc, ms);
}

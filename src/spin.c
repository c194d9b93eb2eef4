/* Spin budgets and the polling loop (spin.h). */
#include "spin.h"

#include <sched.h>

#include "clock.h"
#include "options.h"

#define PROBE_GAP_MAX 64
/* An answered wait that slept lasted the sleep's own costs on top of the
 * peer's answer: up to this many times SPIN_MAX_US, it still counts as a
 * quick peer (spin.h). */
#define SLEEP_SLACK 4
/* A poll may learn up to this many times SPIN_MAX_US, when it was seen
 * answered sooner than waits that slept, by at least 1/WIN_MARGIN of them. */
#define POLL_OVER_SLEEP_MAX 16
#define WIN_MARGIN 4
#define KEEP_MARGIN 16
/* The kernel's default timer slack: a nap shorter than this oversleeps by
 * more than it lasts, so a stream whose mean wait is under four of them
 * (on hardware, most) does not nap but is woken by a doorbell. */
#define NAP_MIN_NS 50000

/* The longest poll an adaptive link may learn: past SPIN_MAX_US only when
 * polling was seen to beat sleeping (spin.h). */
static int64_t cap_ns(int64_t max)
{
  int64_t cap = POLL_OVER_SLEEP_MAX * max;
  return cap < UINT32_MAX ? cap : UINT32_MAX;
}

/* How long a poll must last to be weighed against a sleep: as long as the
 * link's answered waits that slept have lasted, at least SPIN_MAX_US and at
 * most the cap. Probes poll that long, and a link where polling won polls
 * at least that long (spin.h). */
static int64_t sleep_cost(int64_t slept, int64_t max, int64_t cap)
{
  return slept < max ? max : slept > cap ? cap : slept;
}

static int64_t grant(r2s_spin_t *s, int64_t budget)
{
  __atomic_store_n(&s->granted_ns, (uint32_t)budget, __ATOMIC_RELAXED);
  return budget;
}

int64_t r2s__spin_budget(r2s_spin_t *s, bool adaptive, bool may_probe)
{
  int64_t base = (int64_t)r2s__opt.spin_us * 1000, max = (int64_t)r2s__opt.spin_max_us * 1000;
  if (!adaptive || max <= base) return base;
  int64_t learnt = __atomic_load_n(&s->budget_ns, __ATOMIC_RELAXED);
  if (learnt < base) learnt = base;
  bool slept = __atomic_load_n(&s->last_slept, __ATOMIC_RELAXED);
  if ((learnt > base && !slept) || !may_probe) return grant(s, learnt);
  /* At SPIN_US, or the last wait slept all the same: a probe is due every
   * probe_gap waits (spin.h). */
  uint32_t left = __atomic_load_n(&s->probe_in, __ATOMIC_RELAXED);
  if (left > 0) {
    __atomic_store_n(&s->probe_in, left - 1, __ATOMIC_RELAXED);
    return grant(s, learnt);
  }
  uint32_t gap = __atomic_load_n(&s->probe_gap, __ATOMIC_RELAXED);
  gap = gap ? (gap < PROBE_GAP_MAX ? gap * 2 : PROBE_GAP_MAX) : 1;
  __atomic_store_n(&s->probe_gap, gap, __ATOMIC_RELAXED);
  __atomic_store_n(&s->probe_in, gap, __ATOMIC_RELAXED);
  /* A probe polls as long as a wait that slept has lasted, if longer than
   * SPIN_MAX_US: only that long a poll can tell whether polling beats it. */
  int64_t probe = sleep_cost(__atomic_load_n(&s->slept_ns, __ATOMIC_RELAXED), max, cap_ns(max));
  return grant(s, probe > learnt ? probe : learnt);
}

void r2s__spin_learn(r2s_spin_t *s, int64_t waited_ns, bool answered)
{
  int64_t max = (int64_t)r2s__opt.spin_max_us * 1000, cap = cap_ns(max);
  int64_t granted = __atomic_load_n(&s->granted_ns, __ATOMIC_RELAXED);
  int64_t slept = __atomic_load_n(&s->slept_ns, __ATOMIC_RELAXED);
  int64_t now = __atomic_load_n(&s->budget_ns, __ATOMIC_RELAXED), next;
  bool woken = false, won = __atomic_load_n(&s->won, __ATOMIC_RELAXED);
  if (!answered) {
    if (waited_ns <= max) return; /* no answer yet, but not long: it says nothing */
    next = 0;                     /* the peer is slow or idle: sleep early */
    won = false;
  } else if (waited_ns <= max) {
    /* 1.5 times this wait, but down by an eighth at most per wait: answers
     * that jitter are still polled for */
    next = waited_ns + waited_ns / 2;
    if (next < now - now / 8) next = now - now / 8;
    /* A wait that slept lasted `slept`: polling that long before sleeping
     * at most doubles what a wait costs, and a quick peer's late answer
     * (a preempted host, a retransmit) no longer costs a sleep (spin.h). */
    if (next < slept) next = slept;
    if (next > max) next = max;
    __atomic_store_n(&s->probe_gap, 0, __ATOMIC_RELAXED); /* quick again: probe soon if it slows */
  } else if (waited_ns > cap) {
    next = 0;
    won = false;
  } else if (waited_ns <= granted + granted / 8) {
    /* Answered while polling past SPIN_MAX_US (a probe, or a budget learnt
     * so): worth it only if clearly sooner than waits that slept. A probe
     * is judged by its own wait; once polling has won, by the moving mean
     * of such waits: between emulated hosts single round trips jitter as
     * widely as the waits that slept, and one of them as long as those
     * sent the link back to sleeping, and to a few sleeps before the next
     * probe won again (spin.h). */
    int64_t polled = __atomic_load_n(&s->polled_ns, __ATOMIC_RELAXED);
    polled = won && polled ? polled + (waited_ns - polled) / 4 : waited_ns;
    __atomic_store_n(&s->polled_ns, (uint32_t)polled, __ATOMIC_RELAXED);
    won = slept > 0 && polled < slept - slept / (won ? KEEP_MARGIN : WIN_MARGIN);
    next = won ? (waited_ns + waited_ns / 2 < cap ? waited_ns + waited_ns / 2 : cap) : 0;
  } else {
    /* Answered after a sleep: remember how long such waits last. */
    slept = slept ? slept + (waited_ns - slept) / 4 : waited_ns;
    __atomic_store_n(&s->slept_ns, (uint32_t)slept, __ATOMIC_RELAXED);
    next = waited_ns <= SLEEP_SLACK * max ? max : 0;
    woken = true;
  }
  /* Where polling was seen to beat sleeping, every answered wait polls at
   * least as long as a wait that sleeps lasts (spin.h): an answer that
   * comes later than usual still costs no sleep. */
  if (won) {
    int64_t floor = sleep_cost(slept, max, cap);
    if (next < floor) next = floor;
  }
  __atomic_store_n(&s->won, won, __ATOMIC_RELAXED);
  __atomic_store_n(&s->last_slept, woken, __ATOMIC_RELAXED);
  __atomic_store_n(&s->budget_ns, (uint32_t)next, __ATOMIC_RELAXED);
}

void r2s__spin_learn_stream(r2s_spin_t *s, int64_t waited_ns, bool answered, bool stream)
{
  int64_t mean = __atomic_load_n(&s->stream_ns, __ATOMIC_RELAXED);
  int64_t cap = SLEEP_SLACK * (int64_t)r2s__opt.spin_max_us * 1000;
  if (!answered) {
    /* Not yet: only a wait past a reader's naps says the writer stopped. */
    if (waited_ns > 2 * mean) __atomic_store_n(&s->streaming, false, __ATOMIC_RELAXED);
    return;
  }
  if (!stream || waited_ns > cap) {
    __atomic_store_n(&s->streaming, false, __ATOMIC_RELAXED);
    return;
  }
  mean = mean ? mean + (waited_ns - mean) / 4 : waited_ns;
  __atomic_store_n(&s->stream_ns, (uint32_t)mean, __ATOMIC_RELAXED);
  __atomic_store_n(&s->streaming, true, __ATOMIC_RELAXED);
}

int64_t r2s__spin_nap(r2s_spin_t *s, int64_t waited_ns)
{
  if (!__atomic_load_n(&s->streaming, __ATOMIC_RELAXED)) return 0;
  int64_t mean = __atomic_load_n(&s->stream_ns, __ATOMIC_RELAXED), quarter = mean / 4;
  if (quarter < NAP_MIN_NS || waited_ns >= 2 * mean) return 0;
  /* The next of mean/2, 3/4 mean, mean, ... 2 mean after the wait began. */
  int64_t end = 2 * quarter;
  if (waited_ns >= end) end += ((waited_ns - end) / quarter + 1) * quarter;
  if (end > 2 * mean) end = 2 * mean;
  return end - waited_ns < NAP_MIN_NS ? NAP_MIN_NS : end - waited_ns;
}

bool r2s__spin_until(bool (*ready)(void *arg), void *arg, int64_t budget_ns, bool yield_now)
{
  if (budget_ns <= 0) return false;
  r2s_spin_pace_t pace;
  r2s__spin_pace_start(&pace, budget_ns, yield_now);
  do {
    if (ready(arg)) return true;
  } while (r2s__spin_pace(&pace));
  return false;
}

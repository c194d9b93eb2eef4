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

int64_t r2s__spin_budget(r2s_spin_t *s, bool adaptive, bool may_probe)
{
  int64_t base = (int64_t)r2s__opt.spin_us * 1000, max = (int64_t)r2s__opt.spin_max_us * 1000;
  if (!adaptive || max <= base) return base;
  int64_t learnt = __atomic_load_n(&s->budget_ns, __ATOMIC_RELAXED);
  if (learnt > base || !may_probe) return learnt > base ? learnt : base;
  /* At SPIN_US: a probe is due every probe_gap waits (spin.h). */
  uint32_t left = __atomic_load_n(&s->probe_in, __ATOMIC_RELAXED);
  if (left > 0) {
    __atomic_store_n(&s->probe_in, left - 1, __ATOMIC_RELAXED);
    return base;
  }
  uint32_t gap = __atomic_load_n(&s->probe_gap, __ATOMIC_RELAXED);
  gap = gap ? (gap < PROBE_GAP_MAX ? gap * 2 : PROBE_GAP_MAX) : 1;
  __atomic_store_n(&s->probe_gap, gap, __ATOMIC_RELAXED);
  __atomic_store_n(&s->probe_in, gap, __ATOMIC_RELAXED);
  return max;
}

void r2s__spin_learn(r2s_spin_t *s, int64_t waited_ns, bool answered)
{
  int64_t max = (int64_t)r2s__opt.spin_max_us * 1000;
  uint32_t next;
  if (waited_ns > (answered ? SLEEP_SLACK * max : max))
    next = 0; /* the peer is slow or idle: sleep early */
  else if (answered) {
    next = (uint32_t)(waited_ns + waited_ns / 2 < max ? waited_ns + waited_ns / 2 : max);
    __atomic_store_n(&s->probe_gap, 0, __ATOMIC_RELAXED); /* quick again: probe soon if it slows */
  } else
    return; /* no answer yet, but not long: it says nothing */
  __atomic_store_n(&s->budget_ns, next, __ATOMIC_RELAXED);
}

bool r2s__spin_until(bool (*ready)(void *arg), void *arg, int64_t budget_ns, bool yield_now)
{
  if (budget_ns <= 0) return false;
  int64_t start = r2s__now_ns(), now = start;
  int64_t yield_after = yield_now ? start : start + (int64_t)r2s__opt.spin_us * 1000;
  for (unsigned spins = 1;; spins++) {
    if (ready(arg)) return true;
    /* The clock costs more than a look at the ring: read it now and then. */
    if ((spins & 31) == 0 || now >= yield_after) {
      now = r2s__now_ns();
      if (now - start >= budget_ns) return false;
    }
    if (now >= yield_after)
      sched_yield();
    else
      __builtin_ia32_pause();
  }
}

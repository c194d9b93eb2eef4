/*
 * spin.h - how long a blocked call polls the rings before it sleeps.
 *
 * Contract:
 *  - Sleeping costs a fixed price: an announcement to the peer, a DOORBELL
 *    over TCP, a wake-up from the kernel. A peer that answers sooner than
 *    that price is better waited for by polling the ring.
 *  - A link with a fixed budget (shared memory: the peer on another core
 *    answers in well under a microsecond, or is busy for long) polls for
 *    R2SOCK_SPIN_US.
 *  - A link with an adaptive budget (RDMA: a round trip of the device costs
 *    microseconds on hardware, tens of them on Soft-RoCE) learns from its
 *    own waits: after a wait that ended within R2SOCK_SPIN_MAX_US, the next
 *    poll lasts up to 1.5 times that wait (never less than SPIN_US, and an
 *    eighth less than the last budget at least, so that answers that jitter
 *    are still polled for, and never less than the waits that slept have
 *    lasted, see below, up to SPIN_MAX_US); after
 *    a longer wait (an idle peer, a timeout) it is back to SPIN_US. Only
 *    waits for the peer's bytes adapt, and only to replies: a wait that
 *    ends with a stream's worth in the ring (16 KiB) is treated as long,
 *    since its writer is busy and polling would take CPU from it; so is a
 *    writer's wait for room (link/ready.c decides both).
 *  - A wait that sleeps lasts at least the sleep's costs, which can exceed
 *    SPIN_MAX_US by themselves (Soft-RoCE under emulation: milliseconds).
 *    So an answered wait of up to 4 times SPIN_MAX_US still sets the budget
 *    to SPIN_MAX_US. And a link at SPIN_US, or whose last answered wait
 *    slept past SPIN_MAX_US all the same, polls longer now and then (a
 *    probe): after 1 wait, then 2, 4, ... up to 64 waits while probes fail.
 *  - Why quick waits poll as long as a sleep lasts: polling that long
 *    before sleeping at most doubles what a wait costs (the classic bound
 *    for spinning before blocking), while a budget of 1.5 times the last
 *    waits slept whenever an answer came a little late (a host that
 *    preempted either end, a device retry), and each such sleep cost the
 *    announcement, a doorbell and a wake-up: on Soft-RoCE in one guest,
 *    a 64 B ping-pong's ends slept on 100 to 340 waits per 4 s each,
 *    against 2 to 23 with the floor, and its p99 fell to a third to a half.
 *  - Two ends that both sleep each see the other answer late, because the
 *    other slept: each wait lasts two wake-ups. Polling SPIN_MAX_US cannot
 *    tell them apart from slow peers when a wake-up costs more than that.
 *    So a link remembers how long its answered waits that slept lasted (a
 *    moving mean), and a probe polls that long (at least SPIN_MAX_US, at
 *    most 16 times it). A probe answered while polling past SPIN_MAX_US
 *    clearly sooner than those waits (by a quarter) shows polling beats
 *    sleeping: the budget becomes 1.5 times that wait (up to the same cap),
 *    and the peer, whose waits now end quickly, learns to poll too. A probe
 *    answered no sooner than a sleep would have been is a slow peer: back
 *    to SPIN_US. An idle application so polls SPIN_US per wait plus one
 *    probe per 64 waits at most, a probe as long as its waits that slept;
 *    one in a quick exchange skips the sleep's costs. Only a wait on a few
 *    links probes: poll/epoll over many use what their links learnt.
 *  - Once polling has won so, every answered wait polls at least as long as
 *    waits that slept lasted (the cost a sleep would add), until polls
 *    past SPIN_MAX_US save less than a sixteenth of that on average (a
 *    moving mean of their waits), or a wait past SPIN_MAX_US goes
 *    unanswered (an idle peer). Round trips between emulated hosts jitter
 *    from 0.2 to 5 ms: a budget that follows the last few waits slept
 *    through the longer ones, and then both ends slept; and a single round
 *    trip as long as the waits that slept, judged alone, sent the link back
 *    to sleeping until its next probe won (the pair's client slept on 2 to
 *    12 % of its waits so, on 0.4 to 2 % with the mean).
 *  - Past the first SPIN_US a poll yields the CPU between looks, so that on
 *    a small machine the peer (or Soft-RoCE's kernel threads) still runs.
 *    A wait whose peer last ran on this very CPU yields from its first look:
 *    polling there only delays the peer it waits for, and a yield hands it
 *    the CPU without a doorbell or a sleep.
 *  - A reader of a stream (its waits end with a stream's worth in the ring)
 *    naps before it sleeps: it sleeps in the kernel for a while without
 *    announcing it, looks at the ring, and only once its waits as a reader
 *    lasted twice their mean does it ask for a doorbell. Its writer is busy
 *    and the bytes come in chunks: an announced sleep cost that writer a
 *    wake-up of its progress thread and a doorbell per chunk (in one guest
 *    an eighth of the writer's CPU, the writer being what limits the
 *    stream), a nap costs the reader alone. Naps end at half the mean wait
 *    and then every quarter of it, so a wait learnt from where its bytes
 *    were found can shrink as well as grow: the mean settles between the
 *    writer's gaps and 4/3 of them, instead of creeping up by each nap's
 *    oversleep. Bytes that come during a nap are seen up to half a mean
 *    wait late, and a stream's mean is at most SLEEP_SLACK times
 *    SPIN_MAX_US (longer gaps are not napped through), so the ring, which
 *    holds many gaps' worth, does not fill meanwhile. A stream whose
 *    quarter mean wait is under the kernel's timer slack (50 us) does not
 *    nap: such a nap would oversleep by more than it lasts (hardware).
 *  - The budget is a hint shared by the link's threads: relaxed atomics,
 *    no lock; a lost update only costs one wait's precision.
 */
#ifndef R2S_SPIN_H
#define R2S_SPIN_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "options.h"

/* One direction's learnt budget; zero-initialised means SPIN_US. */
typedef struct r2s_spin_s {
  uint32_t budget_ns;
  uint32_t probe_in, probe_gap; /* waits until the next probe, and the gap after it */
  uint32_t granted_ns;          /* the budget last handed out */
  uint32_t slept_ns;            /* how long answered waits that slept last (a moving mean) */
  uint32_t polled_ns;           /* how long answered polls past SPIN_MAX_US last, once won (a moving mean) */
  uint32_t stream_ns;           /* how long waits answered by a stream's worth last (a moving mean) */
  bool streaming;               /* the last answered wait was a stream's: the next one may nap */
  bool last_slept;              /* the last answered wait slept past SPIN_MAX_US */
  bool won;                     /* polling was seen to beat sleeping, not undone since */
} r2s_spin_t;

/* The budget of the next poll: SPIN_US, or the learnt one if adaptive;
 * may_probe lets a due probe count this wait (not in a wait over many
 * links: of many idle links, one or another would always be due). */
int64_t r2s__spin_budget(r2s_spin_t *s, bool adaptive, bool may_probe);

/* A wait of this link ended `waited_ns` after it began (the ring served
 * it), or lasted that long without an answer (answered: false). */
void r2s__spin_learn(r2s_spin_t *s, int64_t waited_ns, bool answered);

/* What a wait of this link for the peer's bytes (adaptive links) says of
 * a stream: answered with a stream's worth in the ring (stream), answered
 * with less, or not answered after waited_ns. */
void r2s__spin_learn_stream(r2s_spin_t *s, int64_t waited_ns, bool answered, bool stream);

/* How long a reader whose wait has lasted waited_ns should nap now before
 * it looks at the ring again; 0: arm and sleep (spin.h). */
int64_t r2s__spin_nap(r2s_spin_t *s, int64_t waited_ns);

/* Polls ready(arg) until it returns true (then true) or budget_ns pass
 * (then false). yield_now: yield the CPU between all looks, not only past
 * SPIN_US (the peer last ran on this CPU: it cannot answer while we poll). */
bool r2s__spin_until(bool (*ready)(void *arg), void *arg, int64_t budget_ns, bool yield_now);

/* The pace of such a loop, for one that looks at a single thing inline
 * (a blocked reader's ring, link/ready.c): under emulation every call and
 * callback between two looks lengthened the wait (docs/rdma.md, "A short
 * way for ring reads and writes"). Between looks it pauses, or yields
 * past SPIN_US (from the start with yield_now); the clock, which costs
 * more than a look, is read every 32nd look, and at every look once
 * yielding. */
typedef struct r2s_spin_pace_s {
  int64_t start, now, yield_after, budget_ns;
  unsigned looks;
} r2s_spin_pace_t;

static inline void r2s__spin_pace_start(r2s_spin_pace_t *p, int64_t budget_ns, bool yield_now)
{
  p->start = p->now = r2s__now_ns();
  p->yield_after = yield_now ? p->start : p->start + (int64_t)r2s__opt.spin_us * 1000;
  p->budget_ns = budget_ns;
  p->looks = 0;
}

/* After a look that found nothing: false once the budget is spent, else
 * pauses or yields, and true (look again). */
static inline bool r2s__spin_pace(r2s_spin_pace_t *p)
{
  if ((++p->looks & 31) == 0 || p->now >= p->yield_after) {
    p->now = r2s__now_ns();
    if (p->now - p->start >= p->budget_ns) return false;
  }
  if (p->now >= p->yield_after)
    sched_yield();
  else
    __builtin_ia32_pause();
  return true;
}

#endif

/* Spin budgets (spin.h): a fixed link polls SPIN_US; an adaptive one polls
 * 1.5 times its last quick wait, falls back after a long one, probes at
 * doubling gaps, polls past SPIN_MAX_US only where that beats sleeping
 * (modelled ping-pongs); a stream's reader naps on a schedule that follows
 * its writer's gaps (a modelled stream); and the polling loop ends on
 * readiness or at its budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "options.h"
#include "spin.h"

#define US 1000

static int setup(void **state)
{
  (void)state;
  r2s__opt.spin_us = 20;
  r2s__opt.spin_max_us = 1000;
  return 0;
}

static void test_fixed_link_polls_spin_us(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  r2s__spin_learn(&s, 100 * US, true);
  for (int i = 0; i < 200; i++) assert_int_equal(r2s__spin_budget(&s, false, true), 20 * US);
}

static void test_quick_waits_lengthen_the_poll(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  r2s__spin_learn(&s, 100 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 150 * US);
  /* down by an eighth at most per wait, so that answers that jitter are
   * still polled for, to 1.5 times the wait */
  r2s__spin_learn(&s, 40 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 150 * US - 150 * US / 8);
  for (int i = 0; i < 20; i++) r2s__spin_learn(&s, 40 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 60 * US);
  /* capped at SPIN_MAX_US */
  r2s__spin_learn(&s, 900 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* an answered wait that slept counts as quick up to 4 times the maximum;
   * since it slept all the same, the next wait is a probe as long as it */
  r2s__spin_learn(&s, 3500 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 3500 * US);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* a wait unanswered but short says nothing: the next probe comes after
   * a gap of one wait */
  r2s__spin_learn(&s, 500 * US, false);
  assert_int_equal(r2s__spin_budget(&s, true, true), 3500 * US);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* a quick answer never polls less than SPIN_US */
  r2s_spin_t q = {0};
  r2s__spin_learn(&q, 2 * US, true);
  assert_int_equal(r2s__spin_budget(&q, true, true), 1000 * US); /* the first probe */
  assert_int_equal(r2s__spin_budget(&q, true, true), 20 * US);
}

static void test_long_waits_fall_back_and_probe_rarely(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  r2s__spin_learn(&s, 100 * US, true);
  r2s__spin_learn(&s, 5000 * US, true); /* an idle peer */
  /* From now on SPIN_US, except probes after gaps of 1, 2, 4, ... 64 waits
   * while every wait stays long; a probe polls as long as the answered wait
   * that slept (5 ms), which is longer than SPIN_MAX_US. */
  int probes = 0, waits = 2000, last_probe = -1, gap = 0;
  for (int i = 0; i < waits; i++) {
    int64_t b = r2s__spin_budget(&s, true, true);
    assert_true(b == 20 * US || b == 5000 * US);
    if (b == 5000 * US) {
      if (last_probe >= 0) {
        assert_true(i - last_probe >= gap);
        gap = i - last_probe;
      }
      last_probe = i;
      probes++;
    }
    r2s__spin_learn(&s, b == 5000 * US ? 5100 * US : 5000 * US, false);
  }
  assert_true(probes >= 2);
  assert_true(probes <= waits / 64 + 8);
  assert_true(gap <= 65);
}

static void test_sets_of_links_do_not_probe(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  for (int i = 0; i < 200; i++) assert_int_equal(r2s__spin_budget(&s, true, false), 20 * US);
  r2s__spin_learn(&s, 100 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, false), 150 * US);
}

static void test_zero_max_disables_adapting(void **state)
{
  (void)state;
  r2s__opt.spin_max_us = 0;
  r2s_spin_t s = {0};
  r2s__spin_learn(&s, 0, true);
  for (int i = 0; i < 200; i++) assert_int_equal(r2s__spin_budget(&s, true, true), 20 * US);
}

/* A model of a 64 B ping-pong in simulated time: a message takes `one_way`
 * ns; an end that polls through its budget sleeps, and once the message is
 * there it costs `wake` ns more to wake up. */
typedef struct end_s {
  r2s_spin_t spin;
  int64_t began, budget; /* the current wait */
  int64_t polled_ns;     /* time spent polling, over all waits */
  int sleeps;
} end_t;

static void end_wait(end_t *e, int64_t now)
{
  e->began = now;
  e->budget = r2s__spin_budget(&e->spin, true, true);
}

/* The end's wait ends with the message that arrives at `arrival`: returns
 * when the end has it. */
static int64_t end_receive(end_t *e, int64_t arrival, int64_t wake)
{
  bool slept = arrival - e->began > e->budget;
  int64_t got = slept ? arrival + wake : arrival;
  e->polled_ns += slept ? e->budget : arrival - e->began;
  e->sleeps += slept;
  r2s__spin_learn(&e->spin, got - e->began, true);
  return got;
}

/* `n` waits of the end, each answered `after` ns after it began (a peer
 * that never sleeps); returns the time after the last. */
static int64_t answer_after(end_t *e, int64_t now, int64_t after, int64_t wake, int n)
{
  for (int i = 0; i < n; i++) {
    end_wait(e, now);
    now = end_receive(e, now + after, wake);
  }
  return now;
}

/* Where a slow phase of the host leaves an end: its last wait slept and
 * lasted 10 ms, and `waits` more passed at SPIN_US (so that the two ends'
 * probes fall out of step). */
static void after_slow_phase(end_t *e, int waits)
{
  r2s__spin_learn(&e->spin, 100 * US, true);
  r2s__spin_learn(&e->spin, 10000 * US, true);
  for (int i = 0; i < waits; i++) {
    end_wait(e, 0);
    r2s__spin_learn(&e->spin, 10000 * US, true);
  }
}

/* Two adaptive ends exchange `n` messages each way; returns how many of the
 * last `tail` exchanges had an end sleep. */
static int ping_pong_sleeps(int64_t one_way, int64_t wake, int skew, int n, int tail)
{
  end_t a = {0}, b = {0};
  after_slow_phase(&a, 0);
  after_slow_phase(&b, skew);
  int64_t now = 0;
  end_wait(&b, now);
  int late = 0;
  for (int i = 0; i < n; i++) {
    int sleeps = a.sleeps + b.sleeps;
    end_wait(&a, now); /* a sends its request, then waits for the reply */
    now = end_receive(&b, now + one_way, wake);
    end_wait(&b, now); /* b replies at once, then waits for the next request */
    now = end_receive(&a, now + one_way, wake);
    if (i >= n - tail && a.sleeps + b.sleeps > sleeps) late++;
  }
  return late;
}

static void test_two_sleeping_ends_find_polling_again(void **state)
{
  (void)state;
  /* Soft-RoCE under emulation: a round trip of 40 us (one guest) or 800 us
   * (two guests), a wake-up of 0.7 to 5 ms. Polling wins by far, but each
   * end's wait is long only because the other slept, and a poll of
   * SPIN_MAX_US finds no answer: waits of up to 4 times SPIN_MAX_US keep
   * the budget at SPIN_MAX_US, longer ones drop it to SPIN_US. */
  for (int skew = 0; skew < 130; skew++) {
    assert_int_equal(ping_pong_sleeps(20 * US, 4000 * US, skew, 1000, 200), 0);
    assert_int_equal(ping_pong_sleeps(20 * US, 2000 * US, skew, 1000, 200), 0);
    assert_int_equal(ping_pong_sleeps(400 * US, 5000 * US, skew, 1000, 200), 0);
    assert_int_equal(ping_pong_sleeps(200 * US, 1500 * US, skew, 1000, 200), 0);
    assert_int_equal(ping_pong_sleeps(200 * US, 700 * US, skew, 1000, 200), 0);
  }
}

/* The pair of guests: one-way times that jitter widely (as measured
 * between two emulated hosts: mostly 100-500 us, a tenth 0.5-2.5 ms; mean
 * 419 us). Deterministic (xorshift). */
static uint64_t rng = 88172645463325252ull;
static uint64_t xorshift(void)
{
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static int64_t jitter_one_way(void)
{
  uint64_t r = xorshift() % 1000;
  if (r < 900) return (int64_t)(100 + r * 400 / 900) * US;
  return (int64_t)(500 + (r - 900) * 20) * US;
}

/* Two adaptive ends exchange `n` messages each way, one-way times drawn
 * from `one_way`, a wake-up of `wake`. Returns the share of exchanges, in
 * per mille, in which an end slept; *mean_ns: the mean round trip. */
static int sleeps_permille(int64_t (*one_way)(void), int64_t wake, int n, int64_t *mean_ns)
{
  end_t a = {0}, b = {0};
  int64_t now = 0;
  end_wait(&b, now);
  int late = 0;
  for (int i = 0; i < n; i++) {
    int sleeps = a.sleeps + b.sleeps;
    end_wait(&a, now);
    now = end_receive(&b, now + one_way(), wake);
    end_wait(&b, now);
    now = end_receive(&a, now + one_way(), wake);
    late += a.sleeps + b.sleeps > sleeps;
  }
  *mean_ns = now / n;
  return late * 1000 / n;
}

/* For wake-ups of 1 ms up to `wake_max`: at most `max_pm` per mille of
 * 20000 exchanges slept, and the mean round trip is at most `max_mean`. */
static void expect_polled_for(int64_t (*one_way)(void), int64_t wake_max, int max_pm, int64_t max_mean)
{
  for (int64_t wake = 1000 * US; wake <= wake_max; wake += 1000 * US) {
    int64_t mean;
    int pm = sleeps_permille(one_way, wake, 20000, &mean);
    print_message("wake-up %lld us: %d per mille of exchanges slept, mean round trip %lld us\n",
                  (long long)(wake / US), pm, (long long)(mean / US));
    assert_true(pm <= max_pm);
    assert_true(mean <= max_mean);
  }
}

static void test_jittery_round_trips_are_polled_for(void **state)
{
  (void)state;
  /* The budget follows the last waits (1.5 times, an eighth less per wait
   * at most) and cannot pass SPIN_MAX_US by itself: a round trip longer
   * than the last few used to sleep, and then both ends slept (45 % of the
   * exchanges, a mean round trip of 1.5 to 3.7 ms against 0.84 ms for
   * pure polling). Once polling has won, every wait polls at least as long
   * as a wait that sleeps lasts. */
  expect_polled_for(jitter_one_way, 4000 * US, 50, 2 * 419 * US * 6 / 5);
}

/* The pair in a loaded phase, as traced on the guests: one-way times of
 * 250-750 us for 70 % of the messages, 0.75-2 ms for 20 %, 2-5 ms for 10 %
 * (mean 972 us), so that a round trip often lasts as long as the waits
 * that slept. */
static int64_t wide_one_way(void)
{
  uint64_t r = xorshift() % 1000;
  if (r < 700) return (int64_t)(250 + r * 500 / 700) * US;
  if (r < 900) return (int64_t)(750 + (r - 700) * 1250 / 200) * US;
  return (int64_t)(2000 + (r - 900) * 3000 / 100) * US;
}

static void test_wide_jitter_keeps_polling(void **state)
{
  (void)state;
  /* Judged by its last wait alone, won polling ended on every round trip
   * about as long as a sleep: 16 per mille of the exchanges slept with a
   * wake-up of 1 ms. Judged by the mean of its waits, it keeps polling:
   * the round trip stays within 5 % of pure polling's (2 x 972 us). */
  expect_polled_for(wide_one_way, 3000 * US, 5, 2 * 972 * US * 21 / 20);
}

static void test_one_late_poll_keeps_won_polling(void **state)
{
  (void)state;
  /* A peer that answers in 3 ms where a sleep costs 2 ms more: polling
   * wins, and a wait polls at least as long as waits that slept (5 ms). */
  end_t a = {0};
  int64_t now = answer_after(&a, 0, 3000 * US, 2000 * US, 200);
  assert_true(a.spin.won);
  int64_t slept = a.spin.slept_ns;
  /* One answer nearly as late as a sleep (the pair's round trips jitter
   * so): it was polled for, and polling goes on. Judged alone, it saved
   * less than a sixteenth of a sleep and ended polling. */
  end_wait(&a, now);
  assert_true(a.budget >= slept);
  int sleeps = a.sleeps;
  now = end_receive(&a, now + slept - slept / 32, 2000 * US);
  assert_int_equal(a.sleeps, sleeps);
  assert_true(a.spin.won);
  end_wait(&a, now);
  now = end_receive(&a, now + 3000 * US, 2000 * US);
  assert_true(a.spin.won);
  /* Answers that keep coming that late: polling saves nothing, it ends
   * within a few waits. */
  int n = 0;
  while (a.spin.won && n < 20) {
    end_wait(&a, now);
    now = end_receive(&a, now + slept - slept / 32, 2000 * US);
    n++;
  }
  assert_false(a.spin.won);
  assert_true(n >= 2);
}

/* A quick ping-pong (one-way 15 us, a wake-up of 1 ms) where every 50th
 * message comes 200 us late (a preempted host, a device retry); returns
 * how many waits of both ends slept, *first those of the first `settle`
 * exchanges. */
static int late_answers_sleeps(int n, int settle, int *first)
{
  end_t a = {0}, b = {0};
  int64_t now = 0;
  end_wait(&b, now);
  for (int i = 0; i < n; i++) {
    if (i == settle) *first = a.sleeps + b.sleeps;
    end_wait(&a, now);
    now = end_receive(&b, now + 15 * US + (i % 50 == 49 ? 200 * US : 0), 1000 * US);
    end_wait(&b, now);
    now = end_receive(&a, now + 15 * US, 1000 * US);
  }
  return a.sleeps + b.sleeps;
}

static void test_late_answers_of_a_quick_peer_are_polled_for(void **state)
{
  (void)state;
  /* 1.5 times the last waits (45 us) slept on every late answer: 109 of
   * 10000 waits. Once a sleep was seen to cost 1.2 ms, quick waits poll
   * that long (up to SPIN_MAX_US): the first late answers sleep (and the
   * other end, which waited for the sleeper, once or twice), none after. */
  int first = 0, sleeps = late_answers_sleeps(5000, 500, &first);
  print_message("%d of 10000 waits slept, %d of them in the first 1000\n", sleeps, first);
  assert_true(first <= 10);
  assert_int_equal(sleeps, first);
}

/* An adaptive end against a peer that answers `think` ns after each request
 * and never sleeps; returns the mean time the end polled per wait. */
static int64_t polled_per_wait(int64_t one_way, int64_t wake, int64_t think, int n)
{
  end_t a = {0};
  (void)answer_after(&a, 0, 2 * one_way + think, wake, n);
  return a.polled_ns / n;
}

static void test_slow_peers_are_not_polled_for(void **state)
{
  (void)state;
  /* Hardware: a round trip of 10 us, a wake-up of 30 us. A peer that thinks
   * for 5 or 15 ms is slept for: polling costs SPIN_US a wait, plus now and
   * then a probe as long as a wait. */
  assert_true(polled_per_wait(5 * US, 30 * US, 5000 * US, 2000) < 20 * US + 5000 * US / 32);
  assert_true(polled_per_wait(5 * US, 30 * US, 15000 * US, 2000) < 20 * US + 15000 * US / 32);
  /* An idle peer (1 s): SPIN_US and a probe of SPIN_MAX_US now and then. */
  assert_true(polled_per_wait(5 * US, 30 * US, 1000000 * US, 500) < 20 * US + 1000 * US / 32);
  /* A peer that answers in 300 us is polled for. */
  assert_true(polled_per_wait(5 * US, 30 * US, 300 * US, 200) >= 300 * US);
  end_t a = {0};
  end_wait(&a, 0);
  end_receive(&a, 310 * US, 30 * US);
  end_wait(&a, 0);
  assert_true(a.budget >= 310 * US);
}

static void test_won_polling_ends_when_the_peer_idles(void **state)
{
  (void)state;
  /* An end of the jittery pair that learnt to poll (wake-up 2 ms)... */
  end_t a = {0};
  int64_t now = 0;
  for (int i = 0; i < 2000; i++) {
    end_wait(&a, now);
    now = end_receive(&a, now + jitter_one_way() + jitter_one_way(), 2000 * US);
  }
  assert_true(a.spin.won);
  /* ...then its peer idles (1 s between answers): one long poll, then
   * SPIN_US a wait and a probe now and then, as for any idle peer. */
  a.polled_ns = 0;
  int n = 500;
  (void)answer_after(&a, now, 1000000 * US, 2000 * US, n);
  assert_false(a.spin.won);
  assert_true(a.polled_ns / n < 20 * US + 16 * 1000 * US / 32);
}

/* A stream's reader naps at half its mean wait, then every quarter of it,
 * until twice the mean has passed (spin.h). */
static void test_stream_reader_naps_on_a_schedule(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 0); /* no stream seen yet */
  r2s__spin_learn_stream(&s, 1000 * US, true, true);
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 480 * US);
  assert_int_equal(r2s__spin_nap(&s, 500 * US), 250 * US);
  assert_int_equal(r2s__spin_nap(&s, 760 * US), 240 * US);
  assert_int_equal(r2s__spin_nap(&s, 1900 * US), 100 * US);
  assert_int_equal(r2s__spin_nap(&s, 1995 * US), 50 * US); /* never shorter than the timer's slack */
  assert_int_equal(r2s__spin_nap(&s, 2000 * US), 0);       /* then it asks for a doorbell */
  /* the mean moves by a quarter of each stream wait's difference */
  r2s__spin_learn_stream(&s, 1400 * US, true, true);
  assert_int_equal(s.stream_ns, 1100 * US);
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 530 * US);
}

static void test_napping_ends_with_the_stream(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  r2s__spin_learn_stream(&s, 1000 * US, true, true);
  /* an answer short of a stream's worth (a reply) ends it */
  r2s__spin_learn_stream(&s, 300 * US, true, false);
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 0);
  /* a wait with no answer yet says nothing within the naps, ends it past them */
  r2s__spin_learn_stream(&s, 1000 * US, true, true);
  r2s__spin_learn_stream(&s, 1500 * US, false, false);
  assert_true(r2s__spin_nap(&s, 20 * US) > 0);
  r2s__spin_learn_stream(&s, 2500 * US, false, false);
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 0);
  /* gaps past SLEEP_SLACK times SPIN_MAX_US are not napped through */
  r2s__spin_learn_stream(&s, 1000 * US, true, true);
  r2s__spin_learn_stream(&s, 4001 * US, true, true);
  assert_int_equal(r2s__spin_nap(&s, 20 * US), 0);
  /* nor are means whose quarter is under the timer's slack (50 us) */
  r2s_spin_t q = {0};
  r2s__spin_learn_stream(&q, 199 * US, true, true);
  assert_int_equal(r2s__spin_nap(&q, 20 * US), 0);
  r2s__spin_learn_stream(&q, 207 * US, true, true); /* mean 201 us */
  assert_true(r2s__spin_nap(&q, 20 * US) > 0);
}

/* A stream's reader whose writer's bytes come `gap` after each wait
 * begins (plus up to `jitter`), after SPIN_US of polling: it naps on the
 * schedule, each nap ending `slop` late, or sleeps once the naps are
 * over, woken `wake` after the bytes came. Returns its sleeps. */
static int stream_sleeps(r2s_spin_t *s, int64_t gap, int64_t jitter, int64_t slop, int64_t wake, int n)
{
  int sleeps = 0;
  for (int i = 0; i < n; i++) {
    int64_t at = gap + (jitter ? (int64_t)(xorshift() % (uint64_t)jitter) : 0), t = 20 * US, nap;
    while (t < at && (nap = r2s__spin_nap(s, t)) > 0) t += nap + slop;
    if (t < at) t = at + wake, sleeps++;
    r2s__spin_learn_stream(s, t, true, true);
  }
  return sleeps;
}

/* The mean follows the writer's gaps both ways and settles between them
 * and 4/3 of them (plus the naps' oversleep), so the reader neither sleeps
 * nor comes ever later: a mean learnt from nap ends that could only grow
 * would creep up by each nap's oversleep. */
static void test_stream_naps_follow_the_gaps(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  const int64_t slop = 60 * US, wake = 1500 * US;
  int64_t gaps[] = {1000 * US, 400 * US, 2000 * US, 1000 * US};
  for (int g = 0; g < 4; g++) {
    (void)stream_sleeps(&s, gaps[g], 0, slop, wake, 100);
    assert_int_equal(stream_sleeps(&s, gaps[g], 0, slop, wake, 200), 0);
    assert_true(s.stream_ns >= gaps[g]);
    assert_true(s.stream_ns <= gaps[g] + gaps[g] / 3 + 2 * slop);
  }
  /* gaps that jitter by half: a sleep now and then at most */
  assert_true(stream_sleeps(&s, 800 * US, 400 * US, slop, wake, 1000) <= 10);
  assert_true(s.stream_ns <= 1200 * US + 1200 * US / 3 + 2 * slop);
}

static int countdown;
static bool ready_after_count(void *arg)
{
  (void)arg;
  return --countdown <= 0;
}
static bool never(void *arg)
{
  (void)arg;
  return false;
}

static void test_poll_ends_on_ready_or_budget(void **state)
{
  (void)state;
  countdown = 100;
  /* a budget far beyond the looks needed: readiness ends the poll */
  for (int yield_now = 0; yield_now <= 1; yield_now++) {
    countdown = 100;
    assert_true(r2s__spin_until(ready_after_count, NULL, 30 * 1000000000ll, yield_now));
    assert_int_equal(countdown, 0);
    int64_t t0 = r2s__now_ns();
    assert_false(r2s__spin_until(never, NULL, 2000 * US, yield_now));
    assert_true(r2s__now_ns() - t0 >= 2000 * US);
    assert_false(r2s__spin_until(never, NULL, 0, yield_now));
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_fixed_link_polls_spin_us, setup),
      cmocka_unit_test_setup(test_quick_waits_lengthen_the_poll, setup),
      cmocka_unit_test_setup(test_long_waits_fall_back_and_probe_rarely, setup),
      cmocka_unit_test_setup(test_sets_of_links_do_not_probe, setup),
      cmocka_unit_test_setup(test_zero_max_disables_adapting, setup),
      cmocka_unit_test_setup(test_poll_ends_on_ready_or_budget, setup),
      cmocka_unit_test_setup(test_two_sleeping_ends_find_polling_again, setup),
      cmocka_unit_test_setup(test_slow_peers_are_not_polled_for, setup),
      cmocka_unit_test_setup(test_jittery_round_trips_are_polled_for, setup),
      cmocka_unit_test_setup(test_won_polling_ends_when_the_peer_idles, setup),
      cmocka_unit_test_setup(test_late_answers_of_a_quick_peer_are_polled_for, setup),
      cmocka_unit_test_setup(test_wide_jitter_keeps_polling, setup),
      cmocka_unit_test_setup(test_one_late_poll_keeps_won_polling, setup),
      cmocka_unit_test_setup(test_stream_reader_naps_on_a_schedule, setup),
      cmocka_unit_test_setup(test_napping_ends_with_the_stream, setup),
      cmocka_unit_test_setup(test_stream_naps_follow_the_gaps, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Spin budgets (spin.h): a fixed link polls SPIN_US; an adaptive one polls
 * 1.5 times its last quick wait, falls back after a long one, probes with
 * SPIN_MAX_US at doubling gaps, and the polling loop ends on readiness or
 * at its budget. */
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
  r2s__spin_learn(&s, 40 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 60 * US);
  /* capped at SPIN_MAX_US */
  r2s__spin_learn(&s, 900 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* an answered wait that slept counts as quick up to 4 times the maximum */
  r2s__spin_learn(&s, 3500 * US, true);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* a wait unanswered but short says nothing */
  r2s__spin_learn(&s, 500 * US, false);
  assert_int_equal(r2s__spin_budget(&s, true, true), 1000 * US);
  /* a quick answer never polls less than SPIN_US */
  r2s__spin_learn(&s, 2 * US, true);
  int64_t b = r2s__spin_budget(&s, true, true);
  assert_true(b == 20 * US || b == 1000 * US); /* SPIN_US, or a probe */
}

static void test_long_waits_fall_back_and_probe_rarely(void **state)
{
  (void)state;
  r2s_spin_t s = {0};
  r2s__spin_learn(&s, 100 * US, true);
  r2s__spin_learn(&s, 5000 * US, true); /* an idle peer */
  /* From now on SPIN_US, except probes after gaps of 1, 2, 4, ... 64 waits
   * while every wait stays long. */
  int probes = 0, waits = 2000, last_probe = -1, gap = 0;
  for (int i = 0; i < waits; i++) {
    int64_t b = r2s__spin_budget(&s, true, true);
    assert_true(b == 20 * US || b == 1000 * US);
    if (b == 1000 * US) {
      if (last_probe >= 0) {
        assert_true(i - last_probe >= gap);
        gap = i - last_probe;
      }
      last_probe = i;
      probes++;
    }
    r2s__spin_learn(&s, b == 1000 * US ? 1100 * US : 5000 * US, false);
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

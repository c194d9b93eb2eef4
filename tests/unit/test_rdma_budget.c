/* The RDMA memory budget (transport/rdma_budget.h): what a connection
 * costs, what the budget is for each setting and memlock limit, which ring
 * an auto-sized connection gets as the budget fills, and that concurrent
 * reservations never go past it. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "options.h"
#include "stats.h"
#include "transport/rdma_budget.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static void test_conn_cost(void **state)
{
  (void)state;
  /* The ring's control page, its data, the credit line's page, the copy. */
  assert_int_equal(r2s__rdma_conn_cost(2 * MiB, 2 * MiB), 4 * MiB + 8 * KiB);
  assert_int_equal(r2s__rdma_conn_cost(64 * KiB, 64 * KiB), 136 * KiB);
  assert_int_equal(r2s__rdma_conn_cost(64 * KiB, 16 * MiB), 16 * MiB + 72 * KiB);
}

static void test_budget_of(void **state)
{
  (void)state;
  /* Unlimited pinning: the option, or auto. */
  assert_int_equal(r2s__rdma_budget_of(0, 0), R2S_RDMA_BUDGET_AUTO);
  assert_int_equal(r2s__rdma_budget_of(1ull << 34, 0), 1ull << 34);
  assert_int_equal(r2s__rdma_budget_of(64 * KiB, 0), 64 * KiB);
  /* A memlock limit: three quarters of it at most, whatever was asked. */
  assert_int_equal(r2s__rdma_budget_of(0, 8 * MiB), 6 * MiB);
  assert_int_equal(r2s__rdma_budget_of(1ull << 34, 8 * MiB), 6 * MiB);
  assert_int_equal(r2s__rdma_budget_of(1 * MiB, 8 * MiB), 1 * MiB);
  assert_int_equal(r2s__rdma_budget_of(0, 1ull << 40), R2S_RDMA_BUDGET_AUTO);
  assert_int_equal(r2s__rdma_budget_of(0, 64 * KiB), 48 * KiB);
}

static void test_ring_in_budget(void **state)
{
  (void)state;
  const uint64_t least = R2S_RDMA_RING_LEAST;
  /* Room for the wanted ring and its copy: that ring. */
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 256 * MiB), 2 * MiB);
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 4 * MiB + 8 * KiB), 2 * MiB);
  /* One byte short: half as large. */
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 4 * MiB + 8 * KiB - 1), 1 * MiB);
  assert_int_equal(r2s__rdma_ring_in_budget(8 * MiB, least, 5 * MiB), 2 * MiB);
  /* Down to the least, not below it. */
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 136 * KiB), 64 * KiB);
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 136 * KiB - 1), 0);
  assert_int_equal(r2s__rdma_ring_in_budget(2 * MiB, least, 0), 0);
  /* A wanted ring below the least is not grown to it. */
  assert_int_equal(r2s__rdma_ring_in_budget(32 * KiB, least, 256 * MiB), 0);
  /* Every answer is a power of two that fits. */
  for (uint64_t room = 0; room < 20 * MiB; room += 37 * KiB + 1) {
    uint64_t s = r2s__rdma_ring_in_budget(8 * MiB, least, room);
    if (!s) continue;
    assert_true((s & (s - 1)) == 0);
    assert_true(r2s__rdma_conn_cost(s, s) <= room);
    assert_true(s == 8 * MiB || r2s__rdma_conn_cost(2 * s, 2 * s) > room);
  }
}

/* The process's budget, from R2SOCK_RDMA_MEMORY: set before the first
 * call, which reads it once. Unit tests run as whoever runs them, so the
 * memlock limit may hold it lower; the figures below use the budget the
 * process got. */
#define TAKERS 4
#define TAKES  20000
static uint64_t high_water, held_now;

static void *taker(void *arg)
{
  (void)arg;
  for (int i = 0; i < TAKES; i++) {
    uint64_t n = 4096u * (uint64_t)(1 + i % 7);
    if (!r2s__rdma_budget_take(n)) continue;
    uint64_t now = __atomic_add_fetch(&held_now, n, __ATOMIC_SEQ_CST);
    uint64_t hw = __atomic_load_n(&high_water, __ATOMIC_RELAXED);
    while (now > hw && !__atomic_compare_exchange_n(&high_water, &hw, now, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
    }
    __atomic_sub_fetch(&held_now, n, __ATOMIC_SEQ_CST);
    r2s__rdma_budget_give(n);
  }
  return NULL;
}

/* The gauge of what is held (rdma_memory_bytes_now). */
static uint64_t gauge(void)
{
  r2s_stats_t s;
  r2s__stats_snapshot(&s);
  return s.v[R2S_STAT_rdma_memory_bytes_now];
}

static void test_take_give(void **state)
{
  (void)state;
  r2s__opt.rdma_memory = 64 * KiB;
  uint64_t b = r2s__rdma_budget();
  assert_true(b > 0 && b <= 64 * KiB);
  assert_int_equal(r2s__rdma_budget_room(), b);
  assert_int_equal(gauge(), 0);
  assert_true(r2s__rdma_budget_take(b - 4096));
  assert_int_equal(r2s__rdma_budget_room(), 4096);
  assert_int_equal(gauge(), b - 4096);
  assert_false(r2s__rdma_budget_take(8192)); /* refused, and nothing taken */
  assert_int_equal(r2s__rdma_budget_room(), 4096);
  assert_int_equal(gauge(), b - 4096);
  assert_true(r2s__rdma_budget_take(4096));
  assert_int_equal(r2s__rdma_budget_room(), 0);
  assert_int_equal(gauge(), b);
  assert_false(r2s__rdma_budget_take(1));
  assert_false(r2s__rdma_budget_take(UINT64_MAX)); /* no wrap past the budget */
  r2s__rdma_budget_give(b - 4096);
  assert_int_equal(gauge(), 4096);
  r2s__rdma_budget_give(4096);
  assert_int_equal(r2s__rdma_budget_room(), b);
  assert_int_equal(gauge(), 0);

  /* Threads taking and giving at once never hold more than the budget
   * together, and all of it comes back. */
  pthread_t t[TAKERS];
  for (int i = 0; i < TAKERS; i++) assert_int_equal(pthread_create(&t[i], NULL, taker, NULL), 0);
  for (int i = 0; i < TAKERS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  assert_true(high_water > 0);
  assert_true(high_water <= b);
  assert_int_equal(r2s__rdma_budget_room(), b);
  assert_int_equal(gauge(), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conn_cost),
      cmocka_unit_test(test_budget_of),
      cmocka_unit_test(test_ring_in_budget),
      cmocka_unit_test(test_take_give),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

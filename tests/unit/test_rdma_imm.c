/* The 31-bit tails of RDMA data immediates (transport/rdma_imm.h): a
 * consumer that learns the tail from immediates alone must agree with its
 * producer at every immediate, across many wraps of 2^31 and 2^32, when
 * each write moves up to a ring and carries one (rd_put's rule,
 * transport/rdma_producer.c); and the bound that rule keeps is the one the
 * arithmetic needs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "frame.h"
#include "transport/rdma_imm.h"

static uint64_t next(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One producer against one consumer: each write moves 1 byte to a whole
 * ring and carries its tail. Returns how many immediates were checked. */
static unsigned run(uint64_t ring, uint64_t start, uint64_t seed, unsigned steps)
{
  uint64_t s = seed, tail = start, learnt = start;
  unsigned imms = 0;
  for (unsigned i = 0; i < steps; i++) {
    uint64_t to = tail + next(&s) % ring + 1;
    uint32_t imm = r2s__imm_of_tail(to);
    assert_int_equal(imm & R2S_RDMA_IMM_SLEEP, 0); /* the top bit marks announcements */
    assert_true(to - tail < (1ull << 31));
    learnt = r2s__imm_tail_after(learnt, imm);
    assert_int_equal(learnt, to);
    imms++;
    tail = to;
  }
  return imms;
}

static void test_tails_rebuild_exactly(void **state)
{
  (void)state;
  static const uint64_t rings[] = {4096, 1ull << 21, R2S_RDMA_RING_MAX};
  static const uint64_t starts[] = {0, (1ull << 31) - 100, (1ull << 32) - 5000, UINT64_MAX - (1ull << 40)};
  for (unsigned r = 0; r < sizeof rings / sizeof rings[0]; r++)
    for (unsigned k = 0; k < sizeof starts / sizeof starts[0]; k++)
      assert_int_equal(run(rings[r], starts[k], 1000 * r + 10 * k, 20000), 20000);
}

/* Why a write moves at most a ring: 2^31 apart, an immediate says nothing
 * new. */
static void test_a_step_of_2_31_is_ambiguous(void **state)
{
  (void)state;
  uint64_t last = 123456789;
  assert_int_equal(r2s__imm_tail_after(last, r2s__imm_of_tail(last + (1ull << 31))), last);
  assert_int_equal(r2s__imm_tail_after(last, r2s__imm_of_tail(last + (1ull << 31) - 1)), last + (1ull << 31) - 1);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tails_rebuild_exactly),
      cmocka_unit_test(test_a_step_of_2_31_is_ambiguous),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The 31-bit tails of RDMA data immediates (transport/rdma_imm.h): a
 * consumer that learns the tail from immediates alone must agree with its
 * producer at every immediate, across many wraps of 2^31 and 2^32, while
 * the producer follows rd_put's rule (transport/rdma_producer.c) for
 * running out of the peer's receives; and the bound that rule keeps is the
 * one the arithmetic needs. */
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

/* One producer against one consumer. Each step the producer may write up
 * to a ring; when the peer has no receives to spare it stops at its span
 * (and then waits until the peer reports some), and the count may run out
 * between its look and its post (post_data_locked then sends the
 * immediate anyway once it is past the span). Returns how many
 * immediates were checked; *moved: the bytes written. */
static unsigned run(uint64_t ring, uint64_t start, uint64_t seed, unsigned steps, unsigned starve_pct,
                    uint64_t *moved)
{
  uint64_t s = seed, tail = start, last_imm = start, learnt = start, imms = 0, most = 0;
  for (unsigned i = 0; i < steps; i++) {
    bool room = next(&s) % 100 >= starve_pct;
    uint64_t n = next(&s) % ring + 1;
    if (!room) {
      uint64_t left = r2s__imm_span_left(last_imm, tail);
      if (left == 0)
        room = true; /* it waited, until the peer reported receives */
      else if (n > left)
        n = left;
    }
    bool room_at_post = room && next(&s) % 8 != 0;
    uint64_t to = tail + n;
    if (room_at_post || to - last_imm > R2S_IMM_SPAN) {
      uint32_t imm = r2s__imm_of_tail(to);
      assert_int_equal(imm & R2S_RDMA_IMM_SLEEP, 0); /* the top bit marks announcements */
      if (to - last_imm > most) most = to - last_imm;
      learnt = r2s__imm_tail_after(learnt, imm);
      assert_int_equal(learnt, to);
      last_imm = to;
      imms++;
    }
    tail = to;
  }
  assert_true(most < (1ull << 31));
  *moved = tail - start;
  return (unsigned)imms;
}

static void test_tails_rebuild_exactly(void **state)
{
  (void)state;
  static const uint64_t rings[] = {4096, 1ull << 21, R2S_RDMA_RING_MAX};
  static const uint64_t starts[] = {0, (1ull << 31) - 100, (1ull << 32) - 5000, UINT64_MAX - (1ull << 40)};
  for (unsigned r = 0; r < sizeof rings / sizeof rings[0]; r++)
    for (unsigned k = 0; k < sizeof starts / sizeof starts[0]; k++)
      for (unsigned starve = 0; starve <= 100; starve += 25) {
        uint64_t moved;
        unsigned imms = run(rings[r], starts[k], 1000 * r + 10 * k + starve, 20000, starve, &moved);
        /* one that never has receives to spare still sends one per span */
        assert_true(imms >= moved / (R2S_IMM_SPAN + rings[r]));
        if (starve < 100) assert_true(imms > 0);
      }
}

/* A producer that never gets receives walks its span and then stops: the
 * span is what it may write past its last immediate, and no further. */
static void test_span_stops_a_starved_producer(void **state)
{
  (void)state;
  uint64_t last = (1ull << 32) - 77, tail = last;
  assert_int_equal(r2s__imm_span_left(last, tail), R2S_IMM_SPAN);
  tail += R2S_IMM_SPAN - 1;
  assert_int_equal(r2s__imm_span_left(last, tail), 1);
  tail += 1;
  assert_int_equal(r2s__imm_span_left(last, tail), 0);
}

/* Why the span matters: 2^31 apart, an immediate says nothing new. */
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
      cmocka_unit_test(test_span_stops_a_starved_producer),
      cmocka_unit_test(test_a_step_of_2_31_is_ambiguous),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

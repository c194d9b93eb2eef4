/* The ring sizes two RDMA ends agree on (transport/rdma_fit.h): each end
 * computes them from the two handshakes alone, so the owner of a ring and
 * its producer must land on the same figure for every pair of settings, a
 * producer never copies more than it said it would, and without FIT
 * offers the older rule holds unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "transport/rdma_fit.h"

static void test_copy_max(void **state)
{
  (void)state;
  /* Pinned memory limited: no more than its own ring. */
  assert_int_equal(r2s__rdma_copy_max(2u << 20, false), 2u << 20);
  assert_int_equal(r2s__rdma_copy_max(4096, false), 4096);
  /* Unlimited: what an older end accepted, or its own ring if larger. */
  assert_int_equal(r2s__rdma_copy_max(2u << 20, true), R2S_RDMA_PEER_RING_MAX);
  assert_int_equal(r2s__rdma_copy_max(R2S_RDMA_RING_WIDE, true), R2S_RDMA_PEER_RING_MAX);
  assert_int_equal(r2s__rdma_copy_max(64u << 20, true), 64u << 20);
}

/* One end: its ring and its FIT offer; an older end sends none and runs
 * the older rule (its ring used whole; a peer's ring copied up to 16 MiB
 * or its own size), which this end's functions must meet. */
typedef struct {
  uint64_t ring, copy_max;
  bool fit;
} end_t;

/* What the owner uses of its ring, facing `producer`. */
static uint64_t owner_uses(end_t own, end_t producer)
{
  if (!own.fit) return own.ring;
  return r2s__rdma_own_used(own.ring, producer.fit ? producer.copy_max : 0);
}

/* What the producer copies of the ring `owner` offered: 0 declines. */
static uint64_t producer_copies(end_t producer, end_t owner)
{
  if (!producer.fit)
    return owner.ring <= R2S_RDMA_PEER_RING_MAX || owner.ring <= producer.ring ? owner.ring : 0;
  return r2s__rdma_peer_used(owner.ring, owner.fit, producer.ring, producer.copy_max);
}

static void test_ends_agree(void **state)
{
  (void)state;
  unsigned checked = 0, narrowed = 0, declined = 0;
  for (unsigned a = 12; a <= 30; a++)
    for (unsigned b = 12; b <= 30; b++)
      for (unsigned mode = 0; mode < 16; mode++) {
        bool ua = mode & 1, ub = mode & 2, fa = mode & 4, fb = mode & 8;
        end_t ea = {1ull << a, r2s__rdma_copy_max(1ull << a, ua), fa};
        end_t eb = {1ull << b, r2s__rdma_copy_max(1ull << b, ub), fb};
        uint64_t used = producer_copies(eb, ea); /* b writes into a's ring */
        if (used == 0) {
          /* declined: only without FIT, a ring past both limits of the old rule */
          assert_false(fa && fb);
          assert_true(ea.ring > R2S_RDMA_PEER_RING_MAX && ea.ring > eb.ring);
          declined++;
          continue;
        }
        assert_int_equal(used, owner_uses(ea, eb));
        assert_true(r2s__rdma_ring_size_ok(used));
        assert_true(used <= ea.ring);
        if (fa && fb) {
          assert_true(used <= eb.copy_max);
          /* ...and as large as both allow */
          assert_int_equal(used, ea.ring < eb.copy_max ? ea.ring : eb.copy_max);
        } else {
          assert_int_equal(used, ea.ring);
        }
        if (used < ea.ring) narrowed++;
        checked++;
      }
  assert_true(checked > 0 && narrowed > 0 && declined > 0);
}

/* The case FIT is for: a wide ring where pinning is unlimited, facing an
 * end with a memlock limit and the usual 2 MiB ring. That end pins no more
 * than its own ring twice; with an older peer the wide ring is copied
 * whole, as before. */
static void test_wide_meets_limited(void **state)
{
  (void)state;
  end_t wide = {R2S_RDMA_RING_WIDE, r2s__rdma_copy_max(R2S_RDMA_RING_WIDE, true), true};
  end_t limited = {2u << 20, r2s__rdma_copy_max(2u << 20, false), true};
  assert_int_equal(producer_copies(limited, wide), 2u << 20);
  assert_int_equal(owner_uses(wide, limited), 2u << 20);
  assert_int_equal(producer_copies(wide, limited), 2u << 20);
  assert_int_equal(owner_uses(limited, wide), 2u << 20);
  /* two wide ends use their whole rings */
  assert_int_equal(producer_copies(wide, wide), R2S_RDMA_RING_WIDE);
  assert_int_equal(owner_uses(wide, wide), R2S_RDMA_RING_WIDE);
  limited.fit = false;
  assert_int_equal(producer_copies(limited, wide), R2S_RDMA_RING_WIDE);
  assert_int_equal(owner_uses(wide, limited), R2S_RDMA_RING_WIDE);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_copy_max),
      cmocka_unit_test(test_ends_agree),
      cmocka_unit_test(test_wide_meets_limited),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

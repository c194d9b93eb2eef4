/* The stats segment's slot seqlock (statseg_layout.h): a reader racing a
 * writer gets whole identities or nothing, never counters of one identity
 * paired with another, writers exclude each other, and a busy slot makes
 * the bounded reader and the trying writer give up. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "statseg_layout.h"

#define WORDS (sizeof(((r2s_statslot_id_t *)0)->w) / sizeof(uint64_t))
#define ROUNDS 100000u
#define BUMPS 5u

static r2s_statslot_t *slot;
static int writer_done; /* atomic */

static int setup(void **state)
{
  (void)state;
  slot = aligned_alloc(64, sizeof *slot);
  if (!slot) return -1;
  memset(slot, 0, sizeof *slot);
  __atomic_store_n(&writer_done, 0, __ATOMIC_RELAXED);
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  free(slot);
  return 0;
}

/* Incarnation k: identity words all equal to K = 1000 + k, counter reset
 * under the seqlock, then bumped BUMPS times by K outside it, as the data
 * path does. */
static void *reuse_writer(void *arg)
{
  (void)arg;
  for (uint64_t k = 1; k <= ROUNDS; k++) {
    uint64_t big = 1000 + k;
    r2s_statslot_id_t id;
    for (unsigned i = 0; i < WORDS; i++) id.w[i] = big;
    r2s_statslot_begin(slot, false);
    __atomic_store_n(&slot->ctr.tx[0], 0, __ATOMIC_RELEASE); /* as statseg.c's move_counts */
    r2s_statslot_store_id(slot, &id);
    r2s_statslot_end(slot);
    for (unsigned j = 0; j < BUMPS; j++) __atomic_fetch_add(&slot->ctr.tx[0], big, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&writer_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_reader_sees_whole_incarnations(void **state)
{
  (void)state;
  pthread_t w;
  assert_int_equal(pthread_create(&w, NULL, reuse_writer, NULL), 0);
  uint64_t last = 0, good = 0;
  r2s_statslot_id_t id;
  r2s_stat_ctr_t ctr;
  while (!__atomic_load_n(&writer_done, __ATOMIC_ACQUIRE)) {
    if (!r2s_statslot_read(slot, &id, &ctr, 1000)) continue;
    if (id.w[0] == 0) continue; /* before the first incarnation */
    for (unsigned i = 1; i < WORDS; i++) assert_int_equal(id.w[i], id.w[0]); /* not torn */
    assert_true(id.w[0] >= last);                                           /* never back in time */
    assert_int_equal(ctr.tx[0] % id.w[0], 0); /* this incarnation's counter, not the next one's */
    assert_true(ctr.tx[0] <= BUMPS * id.w[0]);
    last = id.w[0];
    good++;
  }
  pthread_join(w, NULL);
  assert_true(r2s_statslot_read(slot, &id, &ctr, 1000));
  assert_int_equal(id.w[0], 1000 + ROUNDS);
  assert_int_equal(ctr.tx[0], BUMPS * (1000 + ROUNDS));
  print_message("consistent snapshots read while the writer ran: %llu\n", (unsigned long long)good);
}

/* Writers of one slot exclude each other through its seq: increments of a
 * plain value under it are never lost. */
static void *incrementer(void *arg)
{
  (void)arg;
  for (unsigned k = 0; k < ROUNDS; k++) {
    r2s_statslot_begin(slot, false);
    r2s_statslot_id_t id;
    uint64_t v = __atomic_load_n(&slot->id.w[0], __ATOMIC_RELAXED) + 1;
    for (unsigned i = 0; i < WORDS; i++) id.w[i] = v;
    r2s_statslot_store_id(slot, &id);
    r2s_statslot_end(slot);
  }
  return NULL;
}

static void test_writers_exclude_each_other(void **state)
{
  (void)state;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, incrementer, NULL), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(slot->id.w[0], 2 * ROUNDS);
  assert_int_equal(slot->seq, 4 * ROUNDS); /* two steps per write, even at rest */
}

static void test_busy_slot_gives_up(void **state)
{
  (void)state;
  r2s_statslot_id_t id;
  r2s_stat_ctr_t ctr;
  assert_true(r2s_statslot_begin(slot, true));
  assert_false(r2s_statslot_begin(slot, true)); /* a trying writer gives up at once */
  assert_false(r2s_statslot_read(slot, &id, &ctr, 10));
  r2s_statslot_end(slot);
  assert_true(r2s_statslot_read(slot, &id, &ctr, 10));
  assert_int_equal(slot->seq, 2);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reader_sees_whole_incarnations, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writers_exclude_each_other, setup, teardown),
      cmocka_unit_test_setup_teardown(test_busy_slot_gives_up, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The fd table and connection life cycle: lookups, dup sharing, reuse of an
 * fd number, range removal, and lock-free reads racing installs and removes. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conn.h"
#include "fdtable.h"
#include "init.h"

static unsigned baseline;

static int setup(void **state)
{
  (void)state;
  r2s__ensure_init();
  baseline = r2s__conn_live_count();
  return r2s__fd_cap > 1000 ? 0 : -1;
}

/* Every test must leave no connection object behind. */
static int teardown(void **state)
{
  (void)state;
  return r2s__conn_live_count() == baseline ? 0 : -1;
}

static void test_not_ours(void **state)
{
  (void)state;
  assert_null(r2s__fd_peek(-1));
  assert_null(r2s__fd_peek(500));
  assert_null(r2s__fd_peek((int)r2s__fd_cap));
  assert_null(r2s__fd_get(500));
  assert_null(r2s__fd_remove(500));
  assert_int_equal(r2s__fd_install((int)r2s__fd_cap, NULL), -EBADF);
}

static void test_install_get_remove(void **state)
{
  (void)state;
  r2s_conn_t *c = r2s__conn_new(AF_INET, R2S_ROLE_SOCKET, 100);
  assert_non_null(c);
  assert_int_equal(r2s__fd_install(100, c), 0);
  r2s__conn_put(c); /* the slot holds the only reference now */
  assert_int_equal(c->refs, 1);
  r2s_conn_t *g = r2s__fd_get(100);
  assert_ptr_equal(g, c);
  assert_int_equal(c->refs, 2);
  r2s__conn_put(g);
  assert_int_equal(r2s__conn_live_count(), baseline + 1);
  r2s_conn_t *r = r2s__fd_remove(100);
  assert_ptr_equal(r, c);
  assert_null(r2s__fd_peek(100));
  r2s__conn_put(r);
  assert_int_equal(c->refs, 0);
}

static void test_dup_shares(void **state)
{
  (void)state;
  r2s_conn_t *c = r2s__conn_new(AF_INET6, R2S_ROLE_CLIENT, 101);
  r2s__fd_install(101, c);
  r2s__fd_install(102, c);
  r2s__conn_put(c);
  assert_int_equal(c->refs, 2);
  r2s__conn_put(r2s__fd_remove(101)); /* close one of two fds */
  assert_int_equal(r2s__conn_live_count(), baseline + 1);
  assert_ptr_equal(r2s__fd_peek(102), c);
  r2s__conn_put(r2s__fd_remove(102)); /* the last close ends the connection */
  assert_int_equal(r2s__conn_live_count(), baseline);
}

static void test_reused_number_replaces(void **state)
{
  (void)state;
  r2s_conn_t *a = r2s__conn_new(AF_INET, R2S_ROLE_CLIENT, 103);
  r2s__fd_install(103, a);
  r2s__conn_put(a);
  /* The kernel reused 103 without the shim seeing the close (a raw
   * syscall): the new socket replaces the stale connection. */
  r2s_conn_t *b = r2s__conn_new(AF_INET, R2S_ROLE_CLIENT, 103);
  r2s__fd_install(103, b);
  r2s__conn_put(b);
  assert_int_equal(r2s__conn_live_count(), baseline + 1);
  assert_ptr_equal(r2s__fd_peek(103), b);
  r2s__conn_put(r2s__fd_remove(103));
}

static void test_remove_range(void **state)
{
  (void)state;
  for (int fd = 110; fd < 120; fd++) {
    r2s_conn_t *c = r2s__conn_new(AF_INET, R2S_ROLE_SERVER, fd);
    r2s__fd_install(fd, c);
    r2s__conn_put(c);
  }
  r2s__fd_remove_range(112, 115);
  for (int fd = 110; fd < 120; fd++) {
    if (fd >= 112 && fd <= 115) assert_null(r2s__fd_peek(fd));
    else assert_non_null(r2s__fd_peek(fd));
  }
  r2s__fd_remove_range(0, ~0u); /* clamped to the highest fd in use */
  for (int fd = 110; fd < 120; fd++) assert_null(r2s__fd_peek(fd));
}

/* Readers must only ever get the connection that was installed at the fd
 * they asked for, however installs and removes race them. */
#define RACE_FDS 16
#define RACE_BASE 200
#define RACE_ROUNDS 20000
static int race_stop;
static long race_bad;

static void *race_reader(void *arg)
{
  (void)arg;
  unsigned x = 12345;
  while (!__atomic_load_n(&race_stop, __ATOMIC_ACQUIRE)) {
    x = x * 1103515245u + 12345u;
    int fd = RACE_BASE + (int)((x >> 16) % RACE_FDS);
    r2s_conn_t *c = r2s__fd_get(fd);
    if (!c) continue;
    if (c->fd_hint != fd || __atomic_load_n(&c->refs, __ATOMIC_RELAXED) < 1)
      __atomic_fetch_add(&race_bad, 1, __ATOMIC_RELAXED);
    r2s__conn_put(c);
  }
  return NULL;
}

static void test_lockfree_race(void **state)
{
  (void)state;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, race_reader, NULL), 0);
  for (int round = 0; round < RACE_ROUNDS; round++) {
    int fd = RACE_BASE + round % RACE_FDS;
    r2s_conn_t *c = r2s__conn_new(AF_INET, R2S_ROLE_SERVER, fd);
    assert_non_null(c);
    r2s__fd_install(fd, c); /* replaces and frees the previous one */
    r2s__conn_put(c);
    if (round % 3 == 0) {
      r2s_conn_t *r = r2s__fd_remove(RACE_BASE + (round / 3) % RACE_FDS);
      if (r) r2s__conn_put(r);
    }
  }
  __atomic_store_n(&race_stop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  r2s__fd_remove_range(RACE_BASE, RACE_BASE + RACE_FDS - 1);
  assert_int_equal(race_bad, 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_not_ours, setup, teardown),
      cmocka_unit_test_setup_teardown(test_install_get_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dup_shares, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reused_number_replaces, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove_range, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lockfree_race, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

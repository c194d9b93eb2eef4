/* The index of an epoll set's registry (epoll_index.h): add, modify,
 * remove and look up by fd and by data, chains of colliding keys, growth
 * and shrinking, many fds, dup'd fds sharing a data, the answers of a walk
 * of the entries kept under random changes, relinking, and allocations
 * that fail (calloc and realloc are wrapped at link time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "epoll_index.h"

/* Allocations to fail from now on: calloc (the index) and realloc (the
 * entries). */
static int fail_calloc, fail_realloc;

void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);

void *__wrap_calloc(size_t n, size_t size)
{
  if (fail_calloc > 0) {
    fail_calloc--;
    return NULL;
  }
  return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
  if (fail_realloc > 0) {
    fail_realloc--;
    return NULL;
  }
  return __real_realloc(p, size);
}

static r2s_ep_reg_t *reg_new(void)
{
  r2s_ep_reg_t *r = calloc(1, sizeof *r);
  assert_non_null(r);
  return r;
}

static void reg_free(r2s_ep_reg_t *r)
{
  r2s__ep_clear(r);
  assert_null(r->v);
  assert_null(r->heads);
  assert_int_equal(r->n, 0);
  free(r);
}

static r2s_ep_entry_t *add(r2s_ep_reg_t *r, int fd, uint64_t data)
{
  r2s_ep_entry_t e = {.fd = fd, .events = EPOLLIN, .data = data};
  return r2s__ep_add(r, &e);
}

/* What a walk of the entries finds: the answers the index must give. */
static r2s_ep_entry_t *walk_fd(r2s_ep_reg_t *r, int fd)
{
  for (unsigned i = 0; i < r->n; i++)
    if (r->v[i].fd == fd) return &r->v[i];
  return NULL;
}

static r2s_ep_entry_t *walk_data(r2s_ep_reg_t *r, uint64_t data)
{
  for (unsigned i = 0; i < r->n; i++)
    if (r->v[i].data == data) return &r->v[i];
  return NULL;
}

/* Every entry is found by its fd and its data as a walk finds it, and
 * the index is as big as the entries' room. */
static void check_all(r2s_ep_reg_t *r)
{
  assert_true(r->n <= r->cap);
  if (r->heads) assert_int_equal(1u << r->bits, r->cap);
  for (unsigned i = 0; i < r->n; i++) {
    assert_ptr_equal(r2s__ep_find_fd(r, r->v[i].fd), &r->v[i]);
    assert_ptr_equal(r2s__ep_find_data(r, r->v[i].data), walk_data(r, r->v[i].data));
  }
}

static void test_add_set_remove(void **state)
{
  (void)state;
  r2s_ep_reg_t *r = reg_new();
  assert_null(r2s__ep_find_fd(r, 5));
  assert_null(r2s__ep_find_data(r, 5));
  r2s_ep_entry_t *e = add(r, 5, 500);
  assert_non_null(e);
  assert_non_null(r->heads);
  assert_non_null(add(r, 6, 600));
  assert_non_null(add(r, 7, 700));
  assert_int_equal(r2s__ep_find_fd(r, 6)->data, 600);
  assert_int_equal(r2s__ep_find_data(r, 700)->fd, 7);
  assert_null(r2s__ep_find_fd(r, 8));
  assert_null(r2s__ep_find_data(r, 800));

  /* MOD: a new data and events for the same fd, at the same place. */
  e = r2s__ep_find_fd(r, 6);
  r2s_ep_entry_t mod = {.fd = 6, .events = EPOLLOUT | EPOLLET, .data = 601};
  r2s__ep_set(r, e, &mod);
  assert_ptr_equal(r2s__ep_find_fd(r, 6), e);
  assert_int_equal(e->events, EPOLLOUT | EPOLLET);
  assert_null(r2s__ep_find_data(r, 600));
  assert_ptr_equal(r2s__ep_find_data(r, 601), e);

  /* DEL of the first: the last takes its place, and is still found. */
  r2s__ep_remove(r, r2s__ep_find_fd(r, 5));
  assert_int_equal(r->n, 2);
  assert_null(r2s__ep_find_fd(r, 5));
  assert_null(r2s__ep_find_data(r, 500));
  assert_int_equal(r->v[0].fd, 7);
  assert_ptr_equal(r2s__ep_find_fd(r, 7), &r->v[0]);
  assert_ptr_equal(r2s__ep_find_data(r, 700), &r->v[0]);
  check_all(r);
  r2s__ep_remove(r, r2s__ep_find_fd(r, 6));
  r2s__ep_remove(r, r2s__ep_find_fd(r, 7));
  assert_int_equal(r->n, 0);
  assert_null(r2s__ep_find_fd(r, 7));
  reg_free(r);
}

/* Keys that share a bucket share a chain: each one is found, and taking
 * one out of the head, the middle or the end of its chain (or moving the
 * last entry into a hole) keeps the others found. */
static void test_collisions(void **state)
{
  (void)state;
  r2s_ep_reg_t *r = reg_new();
  assert_non_null(add(r, 0, 0)); /* the index now has 16 buckets */
  assert_int_equal(r->bits, 4);
  unsigned want = r2s__ep_bucket(1000, 4);
  int fds[8];
  int nf = 0;
  for (int fd = 1000; nf < 8; fd++)
    if (r2s__ep_bucket((uint32_t)fd, 4) == want) fds[nf++] = fd;
  uint64_t datas[6];
  int nd = 0;
  for (uint64_t d = 0x7f0000001000; nd < 6; d += 64)
    if (r2s__ep_bucket(d, 4) == want) datas[nd++] = d;
  for (int i = 0; i < 8; i++) assert_non_null(add(r, fds[i], datas[i % 6]));
  assert_int_equal(r->cap, 16); /* no growth: the chains are as made */
  check_all(r);
  int order[] = {3, 0, 7, 5};
  for (int k = 0; k < 4; k++) {
    r2s__ep_remove(r, r2s__ep_find_fd(r, fds[order[k]]));
    assert_null(r2s__ep_find_fd(r, fds[order[k]]));
    check_all(r);
  }
  /* datas[0] was held by fds 0 and 6; 6 is left. */
  assert_int_equal(r2s__ep_find_data(r, datas[0])->fd, fds[6]);
  assert_null(r2s__ep_find_data(r, datas[5]));
  reg_free(r);
}

/* Many fds: the room doubles, the index with it, and every entry is
 * found; removing most of them gives the room back. */
static void test_growth_many(void **state)
{
  (void)state;
  enum { N = 20000 };
  r2s_ep_reg_t *r = reg_new();
  for (int fd = 0; fd < N; fd++) {
    assert_non_null(add(r, fd, 0x5500000000ull + (uint64_t)fd * 48));
    if ((fd & (fd + 1)) == 0) check_all(r); /* at each power of two */
  }
  assert_int_equal(r->n, N);
  assert_int_equal(r->cap, 32768);
  assert_int_equal(r->bits, 15);
  check_all(r);
  for (int fd = 0; fd < N; fd++)
    assert_int_equal(r2s__ep_find_data(r, 0x5500000000ull + (uint64_t)fd * 48)->fd, fd);
  for (int fd = 0; fd < N - 10; fd++) {
    r2s__ep_remove(r, r2s__ep_find_fd(r, fd));
    if (fd % 997 == 0) check_all(r);
  }
  assert_int_equal(r->n, 10);
  assert_true(r->cap <= 64);
  assert_int_equal(1u << r->bits, r->cap);
  check_all(r);
  for (int fd = 0; fd < N - 10; fd++) assert_null(r2s__ep_find_fd(r, fd));
  reg_free(r);
}

/* dup'd fds of one connection, each registered: an entry per fd, and a
 * data they share finds the first one, as a walk does, then the other
 * once the first goes. */
static void test_dup_fds(void **state)
{
  (void)state;
  r2s_ep_reg_t *r = reg_new();
  r2s_conn_t *c = (r2s_conn_t *)(uintptr_t)0x1000; /* never looked at */
  r2s_ep_entry_t a = {.fd = 10, .events = EPOLLIN, .data = 77, .conn = c, .conn_id = 3};
  r2s_ep_entry_t b = {.fd = 11, .events = EPOLLIN | EPOLLET, .data = 77, .conn = c, .conn_id = 3};
  assert_non_null(add(r, 9, 9));
  assert_non_null(r2s__ep_add(r, &a));
  assert_non_null(r2s__ep_add(r, &b));
  assert_ptr_equal(r2s__ep_find_fd(r, 10)->conn, c);
  assert_ptr_equal(r2s__ep_find_fd(r, 11)->conn, c);
  assert_int_equal(r2s__ep_find_data(r, 77)->fd, 10);
  /* The first goes: the second (moved into its place) is found. */
  r2s__ep_remove(r, r2s__ep_find_fd(r, 10));
  assert_int_equal(r2s__ep_find_data(r, 77)->fd, 11);
  /* Back again, after it: the second stays the first found. */
  assert_non_null(r2s__ep_add(r, &a));
  assert_int_equal(r2s__ep_find_data(r, 77)->fd, 11);
  /* The first of the set goes: the last entry (fd 10) moves to the front. */
  r2s__ep_remove(r, r2s__ep_find_fd(r, 9));
  assert_int_equal(r2s__ep_find_data(r, 77)->fd, 10);
  /* A MOD of one to another data leaves the other alone. */
  b.data = 78;
  r2s__ep_set(r, r2s__ep_find_fd(r, 11), &b);
  assert_int_equal(r2s__ep_find_data(r, 77)->fd, 10);
  assert_int_equal(r2s__ep_find_data(r, 78)->fd, 11);
  check_all(r);
  reg_free(r);
}

/* Random adds, MODs and DELs over a few thousand fds whose data often
 * repeat (a handful of values, fds themselves, and pointers): after each,
 * the looked-up entries are the walk's, and the set holds what a model
 * says. */
static void test_like_a_walk(void **state)
{
  (void)state;
  enum { FDS = 3000, OPS = 60000 };
  static uint64_t model[FDS]; /* data + 1 per fd, 0: not in the set */
  memset(model, 0, sizeof model);
  r2s_ep_reg_t *r = reg_new();
  uint64_t x = 0x243f6a8885a308d3ull;
  unsigned in = 0;
  for (int op = 0; op < OPS; op++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int fd = (int)(x % FDS);
    uint64_t data = (x >> 32) % 3 == 0   ? (x >> 40) % 8
                    : (x >> 32) % 3 == 1 ? (uint64_t)fd
                                         : 0x7f00000000ull + (x >> 44) * 16;
    /* Phases: growing, then shrinking, so that both resizes happen. */
    bool grow = (op / 10000) % 2 == 0;
    r2s_ep_entry_t *e = r2s__ep_find_fd(r, fd);
    assert_ptr_equal(e, walk_fd(r, fd));
    assert_int_equal(e != NULL, model[fd] != 0);
    if (!e && grow) {
      assert_non_null(add(r, fd, data));
      in++;
    } else if (e && ((x >> 20) & 3) == 0) {
      r2s_ep_entry_t mod = {.fd = fd, .events = EPOLLOUT, .data = data};
      r2s__ep_set(r, e, &mod);
    } else if (e) {
      r2s__ep_remove(r, e);
      in--;
      data = (uint64_t)-1;
    } else {
      continue;
    }
    model[fd] = data + 1;
    assert_int_equal(r->n, in);
    for (int k = 0; k < 8; k++)
      assert_ptr_equal(r2s__ep_find_data(r, (uint64_t)k), walk_data(r, (uint64_t)k));
    assert_ptr_equal(r2s__ep_find_data(r, data), walk_data(r, data));
    assert_ptr_equal(r2s__ep_find_data(r, (uint64_t)fd), walk_data(r, (uint64_t)fd));
  }
  check_all(r);
  for (int fd = 0; fd < FDS; fd++) {
    r2s_ep_entry_t *e = r2s__ep_find_fd(r, fd);
    assert_int_equal(e != NULL, model[fd] != 0);
    if (e) assert_int_equal(e->data, model[fd] - 1);
  }
  reg_free(r);
}

/* With the links lost (a fork in the middle of a change), relinking from
 * the entries finds them all again. */
static void test_reindex(void **state)
{
  (void)state;
  r2s_ep_reg_t *r = reg_new();
  for (int fd = 0; fd < 100; fd++) assert_non_null(add(r, fd, (uint64_t)fd % 7));
  memset(r->heads, 0xff, ((size_t)2 << r->bits) * sizeof *r->heads);
  for (unsigned i = 0; i < r->n; i++) r->v[i].next[0] = r->v[i].next[1] = 12345;
  r2s__ep_reindex(r);
  check_all(r);
  reg_free(r);
}

/* No memory for the index: the lookups walk the entries, and the next
 * growth makes it. No memory for a bigger one: the old one serves. No
 * memory for the entries: no entry, and the set is as it was. */
static void test_no_memory(void **state)
{
  (void)state;
  r2s_ep_reg_t *r = reg_new();
  fail_calloc = 1;
  assert_non_null(add(r, 3, 30));
  assert_int_equal(fail_calloc, 0);
  assert_null(r->heads);
  for (int fd = 4; fd < 16; fd++) assert_non_null(add(r, fd, (uint64_t)fd * 10));
  r2s__ep_remove(r, r2s__ep_find_fd(r, 7));
  r2s_ep_entry_t mod = {.fd = 8, .data = 30};
  r2s__ep_set(r, r2s__ep_find_fd(r, 8), &mod);
  assert_null(r->heads);
  check_all(r);
  assert_int_equal(r2s__ep_find_data(r, 30)->fd, 3);
  assert_null(r2s__ep_find_fd(r, 7));
  /* The 17th entry: room doubles, and the index is made. */
  for (int fd = 16; r->n < 16; fd++) assert_non_null(add(r, fd, (uint64_t)fd * 10));
  assert_null(r->heads);
  assert_non_null(add(r, 40, 400));
  assert_int_equal(r->cap, 32);
  assert_non_null(r->heads);
  assert_int_equal(r->bits, 5);
  check_all(r);

  /* Growth to 64 without a bigger index: 32 buckets serve 64 entries. */
  for (int fd = 41; r->n < 32; fd++) assert_non_null(add(r, fd, (uint64_t)fd * 10));
  fail_calloc = 1;
  assert_non_null(add(r, 100, 1000));
  assert_int_equal(r->cap, 64);
  assert_int_equal(r->bits, 5);
  for (int fd = 101; r->n < 64; fd++) assert_non_null(add(r, fd, (uint64_t)fd * 10));
  for (unsigned i = 0; i < r->n; i++) {
    assert_ptr_equal(r2s__ep_find_fd(r, r->v[i].fd), &r->v[i]);
    assert_ptr_equal(r2s__ep_find_data(r, r->v[i].data), walk_data(r, r->v[i].data));
  }

  /* No room for the 65th entry: none, and the 64 stay as they were. */
  fail_realloc = 1;
  assert_null(add(r, 500, 5000));
  assert_int_equal(r->n, 64);
  assert_int_equal(r->cap, 64);
  assert_null(r2s__ep_find_fd(r, 500));
  assert_null(r2s__ep_find_data(r, 5000));
  /* With memory again: the 65th, and an index of 128 buckets. */
  assert_non_null(add(r, 500, 5000));
  assert_int_equal(r->bits, 7);
  check_all(r);

  /* Shrinking that cannot have its smaller room keeps the bigger. */
  fail_realloc = 1000;
  fail_calloc = 1000;
  while (r->n > 3) r2s__ep_remove(r, &r->v[0]);
  fail_realloc = fail_calloc = 0;
  assert_int_equal(r->cap, 128);
  check_all(r);
  reg_free(r);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_set_remove), cmocka_unit_test(test_collisions),
      cmocka_unit_test(test_growth_many),    cmocka_unit_test(test_dup_fds),
      cmocka_unit_test(test_like_a_walk),    cmocka_unit_test(test_reindex),
      cmocka_unit_test(test_no_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

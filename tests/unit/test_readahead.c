/* The read-ahead buffer (readahead.h): bytes come out in the order they
 * went in, across iovecs, with and without peek; it holds at most
 * R2S_READAHEAD_MAX bytes and takes room back from bytes already taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "readahead.h"

/* Appends n bytes of the pattern (byte i of the stream is i*7 mod 251),
 * continuing from stream position *pos; returns how many fitted. */
static size_t put(r2s_readahead_t *ra, size_t n, size_t *pos)
{
  size_t done = 0;
  while (done < n) {
    size_t room;
    uint8_t *p = r2s__readahead_room(ra, &room);
    if (!p) break;
    size_t k = n - done < room ? n - done : room;
    for (size_t i = 0; i < k; i++) p[i] = (uint8_t)(((*pos + i) * 7) % 251);
    r2s__readahead_commit(ra, k);
    *pos += k, done += k;
  }
  return done;
}

static void check(const uint8_t *b, size_t n, size_t from)
{
  for (size_t i = 0; i < n; i++) assert_int_equal(b[i], ((from + i) * 7) % 251);
}

static void test_fifo_across_iovecs_and_peek(void **state)
{
  (void)state;
  r2s_readahead_t ra = {0};
  size_t in = 0, out = 0;
  assert_int_equal(r2s__readahead_len(&ra), 0);
  assert_int_equal(put(&ra, 28, &in), 28);
  uint8_t a[10], b[100];
  struct iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
  assert_int_equal(r2s__readahead_take(&ra, v, 2, 1), 28); /* peek */
  assert_int_equal(r2s__readahead_len(&ra), 28);
  check(a, 10, 0), check(b, 18, 10);
  struct iovec small = {b, 5};
  assert_int_equal(r2s__readahead_take(&ra, &small, 1, 0), 5);
  check(b, 5, out), out += 5;
  assert_int_equal(r2s__readahead_take(&ra, v, 2, 0), 23);
  check(a, 10, out), check(b, 13, out + 10), out += 23;
  assert_int_equal(r2s__readahead_len(&ra), 0);
  assert_null(ra.buf); /* given back once empty */
  assert_int_equal(r2s__readahead_take(&ra, v, 2, 0), 0);
  r2s__readahead_free(&ra);
}

static void test_bounded_and_room_comes_back(void **state)
{
  (void)state;
  r2s_readahead_t ra = {0};
  size_t in = 0, out = 0, room;
  assert_int_equal(put(&ra, R2S_READAHEAD_MAX + 100, &in), R2S_READAHEAD_MAX);
  assert_null(r2s__readahead_room(&ra, &room)); /* full */
  static uint8_t b[R2S_READAHEAD_MAX];
  struct iovec v = {b, 1000};
  assert_int_equal(r2s__readahead_take(&ra, &v, 1, 0), 1000);
  check(b, 1000, out), out += 1000;
  /* The 1000 bytes taken are room again, behind the unread ones. */
  assert_int_equal(put(&ra, 5000, &in), 1000);
  assert_int_equal(r2s__readahead_len(&ra), R2S_READAHEAD_MAX);
  v.iov_len = sizeof b;
  assert_int_equal(r2s__readahead_take(&ra, &v, 1, 0), R2S_READAHEAD_MAX);
  check(b, R2S_READAHEAD_MAX, out);
  r2s__readahead_free(&ra);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_across_iovecs_and_peek),
      cmocka_unit_test(test_bounded_and_room_comes_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

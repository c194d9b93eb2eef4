/* The SPSC byte ring: wrap-around, iovecs, peeking, a full ring, hostile
 * indices, a producer and consumer thread moving checksummed bytes, and
 * what a failover needs (a frozen ring, the producer's unacked bytes). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ring.h"

#define SIZE 4096u

static void *mem;

static int setup(void **state)
{
  (void)state;
  mem = aligned_alloc(4096, r2s__ring_bytes(SIZE));
  if (!mem) return -1;
  r2s__ring_format(mem, SIZE);
  return 0;
}

static int teardown(void **state)
{
  (void)state;
  free(mem);
  return 0;
}

static ssize_t put(r2s_ring_t *r, const void *p, size_t n)
{
  struct iovec v = {(void *)p, n};
  return r2s__ring_put(r, &v, 1, 0, n);
}

static ssize_t get(r2s_ring_t *r, void *p, size_t n, bool peek)
{
  struct iovec v = {p, n};
  return r2s__ring_get(r, &v, 1, n, peek);
}

static void test_attach_checks_size(void **state)
{
  (void)state;
  r2s_ring_t r;
  assert_int_equal(r2s__ring_attach(&r, mem, 3000), -EINVAL);
  assert_int_equal(r2s__ring_attach(&r, mem, 2048), -EINVAL);
  assert_int_equal(r2s__ring_attach(&r, mem, SIZE), 0);
}

/* A ring registered at 16 KiB and used at 4 KiB (an RDMA ring fitted to
 * its producer): the consumer wraps where the producer does, and the rest
 * of the data is never touched. */
static void test_narrow(void **state)
{
  (void)state;
  const uint64_t big = 4 * SIZE;
  uint8_t *m = aligned_alloc(4096, r2s__ring_bytes(big));
  assert_non_null(m);
  r2s__ring_format(m, big);
  memset(m + R2S_RING_CTL_SIZE, 0xee, big);
  r2s_ring_t p, c;
  assert_int_equal(r2s__ring_attach(&c, m, big), 0);
  assert_int_equal(r2s__ring_narrow(&c, 3000), -EINVAL);
  assert_int_equal(r2s__ring_narrow(&c, 2048), -EINVAL);
  assert_int_equal(r2s__ring_narrow(&c, 2 * big), -EINVAL);
  assert_int_equal(r2s__ring_narrow(&c, SIZE), 0);
  assert_int_equal(r2s__ring_attach(&p, m, SIZE), 0);
  uint8_t in[3000], out[3000];
  for (int round = 0; round < 5; round++) {
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 13 + (size_t)round);
    assert_int_equal(put(&p, in, sizeof in), sizeof in);
    assert_int_equal(get(&c, out, sizeof out, false), sizeof out);
    assert_memory_equal(out, in, sizeof in);
  }
  for (uint64_t i = SIZE; i < big; i++) assert_int_equal(m[R2S_RING_CTL_SIZE + i], 0xee);
  /* once bytes moved, the size stays */
  assert_int_equal(r2s__ring_narrow(&c, SIZE), -EINVAL);
  free(m);
}

static void test_wrap_and_peek(void **state)
{
  (void)state;
  r2s_ring_t p, c;
  r2s__ring_attach(&p, mem, SIZE);
  r2s__ring_attach(&c, mem, SIZE);
  uint8_t in[SIZE], out[SIZE];
  for (size_t i = 0; i < SIZE; i++) in[i] = (uint8_t)(i * 31 + 7);
  /* Move the indices near the end so that the next write wraps. */
  assert_int_equal(put(&p, in, 4000), 4000);
  assert_int_equal(get(&c, out, 4000, false), 4000);
  assert_int_equal(put(&p, in, 500), 500); /* 96 bytes at the end, 404 at the start */
  assert_int_equal(r2s__ring_avail(&c), 500);
  assert_int_equal(get(&c, out, 500, true), 500);
  assert_memory_equal(out, in, 500);
  assert_int_equal(r2s__ring_avail(&c), 500); /* peek consumed nothing */
  memset(out, 0, sizeof out);
  assert_int_equal(get(&c, out, 200, false), 200);
  assert_int_equal(get(&c, out + 200, 1000, false), 300);
  assert_memory_equal(out, in, 500);
  assert_int_equal(get(&c, out, 10, false), 0);
}

/* Every length from 0 to 300 (small messages are the latency path), from
 * two iovecs split at a point that moves with the length, at ring offsets
 * that wander around the wrap: the bytes arrive intact, the copy into the
 * ring touches nothing of the ring but its own bytes, and the copy out
 * nothing of the reader's buffer but what it read. */
static void test_every_small_length(void **state)
{
  (void)state;
  r2s_ring_t p, c;
  r2s__ring_attach(&p, mem, SIZE);
  r2s__ring_attach(&c, mem, SIZE);
  uint8_t *data = (uint8_t *)mem + R2S_RING_CTL_SIZE;
  uint8_t in[300], out[300 + 32];
  uint64_t at = 0;
  for (int pass = 0; pass < 3; pass++) {
    for (size_t len = 0; len <= sizeof in; len++) {
      for (size_t i = 0; i < len; i++) in[i] = (uint8_t)(i * 7 + len + (size_t)pass * 3 + 1);
      memset(data, 0xee, SIZE);
      /* two iovecs, split at a point that moves with the length */
      size_t cut = len ? (len * 5 + (size_t)pass) % len : 0;
      struct iovec v[2] = {{in, cut}, {in + cut, len - cut}};
      assert_int_equal(r2s__ring_put(&p, v, 2, 0, len), len);
      for (uint64_t i = 0; i < SIZE; i++) {
        bool ours = ((i - at) & (SIZE - 1)) < len;
        if (!ours) assert_int_equal(data[i], 0xee);
      }
      memset(out, 0x55, sizeof out);
      assert_int_equal(get(&c, out + 16, len, false), len);
      assert_memory_equal(out + 16, in, len);
      for (size_t i = 0; i < 16; i++) assert_int_equal(out[i], 0x55);
      for (size_t i = 16 + len; i < sizeof out; i++) assert_int_equal(out[i], 0x55);
      at += len;
    }
  }
}

static void test_full_ring_and_iovecs(void **state)
{
  (void)state;
  r2s_ring_t p, c;
  r2s__ring_attach(&p, mem, SIZE);
  r2s__ring_attach(&c, mem, SIZE);
  uint8_t a[3000], b[3000], out[SIZE];
  memset(a, 'a', sizeof a);
  memset(b, 'b', sizeof b);
  struct iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
  /* Skip the first 1000 bytes of the vector: 2000 a's, then b's until full. */
  assert_int_equal(r2s__ring_put(&p, v, 2, 1000, 6000), SIZE);
  assert_int_equal(r2s__ring_space(&p), 0);
  assert_int_equal(r2s__ring_put(&p, v, 2, 0, 10), 0);
  struct iovec o[2] = {{out, 100}, {out + 100, SIZE - 100}};
  assert_int_equal(r2s__ring_get(&c, o, 2, SIZE, false), SIZE);
  for (size_t i = 0; i < SIZE; i++) assert_int_equal(out[i], i < 2000 ? 'a' : 'b');
  assert_int_equal(r2s__ring_space(&p), SIZE);
}

/* A peer that writes nonsense into the shared indices is detected before
 * any address is computed from them. */
static void test_hostile_indices(void **state)
{
  (void)state;
  r2s_ring_t p, c;
  r2s__ring_attach(&p, mem, SIZE);
  r2s__ring_attach(&c, mem, SIZE);
  uint8_t buf[64] = {0};
  assert_int_equal(put(&p, buf, 64), 64);
  r2s_ring_ctl_t *ctl = mem;
  ctl->tail = 64 + SIZE + 1; /* more than a ring ahead of the consumer */
  assert_int_equal(r2s__ring_avail(&c), -EPROTO);
  assert_int_equal(get(&c, buf, 64, false), -EPROTO);
  ctl->tail = 64;
  ctl->head = 65; /* the consumer claims bytes that were never written */
  assert_int_equal(r2s__ring_space(&p), -EPROTO);
  ctl->head = (uint64_t)-5; /* or moves backwards */
  assert_int_equal(r2s__ring_space(&p), -EPROTO);
  ctl->head = 0;
  assert_int_equal(r2s__ring_space(&p), SIZE - 64);
}

/* Two threads, 32 MiB through a 4 KiB ring in random-sized pieces. */
#define STREAM_BYTES (32u << 20)
static uint8_t pattern(uint64_t i)
{
  return (uint8_t)((i * 2654435761u) >> 13);
}

static void *producer(void *arg)
{
  r2s_ring_t *p = arg;
  uint8_t buf[1500];
  uint64_t sent = 0;
  unsigned x = 1;
  while (sent < STREAM_BYTES) {
    x = x * 1103515245u + 12345u;
    size_t n = 1 + (x >> 16) % sizeof buf;
    if (n > STREAM_BYTES - sent) n = STREAM_BYTES - sent;
    for (size_t i = 0; i < n; i++) buf[i] = pattern(sent + i);
    size_t off = 0;
    while (off < n) {
      ssize_t k = put(p, buf + off, n - off);
      if (k < 0) return (void *)1;
      off += (size_t)k;
    }
    sent += n;
  }
  return NULL;
}

static void test_two_threads(void **state)
{
  (void)state;
  static r2s_ring_t p, c;
  r2s__ring_attach(&p, mem, SIZE);
  r2s__ring_attach(&c, mem, SIZE);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, producer, &p), 0);
  uint8_t buf[2000];
  uint64_t got = 0, bad = 0;
  unsigned x = 7;
  while (got < STREAM_BYTES) {
    x = x * 1103515245u + 12345u;
    ssize_t n = get(&c, buf, 1 + (x >> 16) % sizeof buf, false);
    assert_true(n >= 0);
    for (ssize_t i = 0; i < n; i++) bad += buf[i] != pattern(got + (uint64_t)i);
    got += (uint64_t)n;
  }
  void *rc;
  pthread_join(t, &rc);
  assert_null(rc);
  assert_int_equal(bad, 0);
  assert_int_equal(got, STREAM_BYTES);
}

/* A failover: the consumer freezes its ring at an offset between what it
 * took and what arrived, and sees nothing past it whatever the producer
 * writes later; the producer hands out the bytes from that offset on,
 * across the wrap, and refuses offsets the consumer cannot have. */
static void test_freeze_and_unacked(void **state)
{
  (void)state;
  r2s_ring_t p, c;
  assert_int_equal(r2s__ring_attach(&p, mem, SIZE), 0);
  assert_int_equal(r2s__ring_attach(&c, mem, SIZE), 0);
  uint8_t buf[SIZE], out[SIZE];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 7 + 3);
  /* move the indices near the end of the data, so the unacked bytes wrap */
  assert_int_equal(put(&p, buf, 3000), 3000);
  assert_int_equal(get(&c, out, 3000, false), 3000);
  assert_int_equal(r2s__ring_space(&p), SIZE);
  assert_int_equal(put(&p, buf, 2000), 2000); /* offsets 3000..5000 */
  assert_int_equal(get(&c, out, 500, false), 500);
  assert_int_equal(r2s__ring_avail(&c), 1500);
  /* beyond what arrived, or before what was taken: refused */
  assert_int_equal(r2s__ring_freeze(&c, 5001), -EINVAL);
  assert_int_equal(r2s__ring_freeze(&c, 3499), -EINVAL);
  assert_int_equal(r2s__ring_freeze(&c, 4000), 0);
  assert_int_equal(put(&p, buf, 100), 100); /* lands, but past the end */
  assert_int_equal(r2s__ring_avail(&c), 500);
  assert_int_equal(get(&c, out, SIZE, false), 500);
  assert_memory_equal(out, buf + 500, 500);
  assert_int_equal(get(&c, out, SIZE, false), 0);
  /* the producer's side: what lies from 4000 to its tail (5100) */
  assert_int_equal(r2s__ring_space(&p), SIZE - 1100);
  struct iovec iov[2];
  assert_int_equal(r2s__ring_unacked(&p, 4000, iov), 2);
  assert_int_equal(iov[0].iov_len + iov[1].iov_len, 1100);
  assert_int_equal(iov[0].iov_len, SIZE - (4000 % SIZE));
  assert_memory_equal(iov[0].iov_base, buf + 1000, iov[0].iov_len);
  assert_memory_equal(iov[1].iov_base, buf + 1000 + iov[0].iov_len, 1000 - iov[0].iov_len);
  assert_memory_equal((uint8_t *)iov[1].iov_base + 1000 - iov[0].iov_len, buf, 100);
  assert_int_equal(r2s__ring_unacked(&p, 5100, iov), 0);
  assert_int_equal(r2s__ring_unacked(&p, 5101, iov), -EPROTO);
  assert_int_equal(r2s__ring_unacked(&p, 3999, iov), -EPROTO);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_attach_checks_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_narrow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrap_and_peek, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_small_length, setup, teardown),
      cmocka_unit_test_setup_teardown(test_full_ring_and_iovecs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_indices, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_freeze_and_unacked, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

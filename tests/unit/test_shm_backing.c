/* The shared-memory transport reserves a ring's pages as the stream needs
 * them (shm.c, "Reserving pages"): its owner the control page and the
 * first 64 KiB, the producer the rest in doubling steps before its writes
 * go past what is reserved. Checked on
 * real segments: what a fresh ring holds, what a longer stream adds, and
 * that pages which cannot be had (the segment cut short under the ring,
 * which faults as a full /dev/shm does) make the producer say -ENOSPC and
 * the consumer -EPROTO, never a SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "libc.h"
#include "ring.h"
#include "options.h"
#include "transport.h"
#include "transport/shm_offer.h"

#define RING  (512u << 10) /* the usual shared-memory ring, set in setup */
#define FIRST (64u << 10)  /* what its owner reserves */

static const r2s_transport_t *tp = &r2s__transport_shm;

/* Two ends in one process: a produces into b's ring and b into a's. The
 * fds keep b's segment reachable after attach unlinks its name. */
typedef struct pair_s {
  r2s_tp_state_t *a, *b;
  int fd_b;
} pair_t;

static void make_pair(pair_t *p)
{
  r2s_handshake_t ha, hb;
  r2s_tp_conn_t conn;
  memset(&ha, 0, sizeof ha), memset(&hb, 0, sizeof hb), memset(&conn, 0, sizeof conn);
  conn.fd = -1;
  assert_int_equal(tp->offer(&p->a, &ha, &conn), 0);
  assert_int_equal(tp->offer(&p->b, &hb, &conn), 0);
  r2s_offer_shm_t ob;
  assert_int_equal(r2s__shm_offer_get(&hb, &ob), 1);
  assert_int_equal(ob.ring_size, RING);
  p->fd_b = shm_open(ob.name, O_RDWR, 0);
  assert_true(p->fd_b >= 0);
  assert_int_equal(tp->attach(p->a, &hb), 0);
  assert_int_equal(tp->attach(p->b, &ha), 0);
  tp->seal(p->a), tp->seal(p->b);
}

static void drop_pair(pair_t *p)
{
  close(p->fd_b);
  tp->release(p->a), tp->release(p->b);
}

/* Bytes of b's segment that hold memory. */
static uint64_t held(const pair_t *p)
{
  struct stat sb;
  assert_int_equal(fstat(p->fd_b, &sb), 0);
  return (uint64_t)sb.st_blocks * 512;
}

static void fill(uint8_t *buf, size_t n, uint64_t at)
{
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)((at + i) * 131 >> 3);
}

static ssize_t put(r2s_tp_state_t *st, const void *buf, size_t n)
{
  struct iovec v = {(void *)buf, n};
  return tp->put(st, &v, 1, 0, n);
}

static ssize_t get(r2s_tp_state_t *st, void *buf, size_t n)
{
  struct iovec v = {buf, n};
  return tp->get(st, &v, 1, n, false);
}

/* The size is set, not auto: auto makes a wide ring on contended CPUs
 * (transport/shm.c, offer_size), and what is tested here is how any ring
 * is reserved, whatever the machine is doing. */
static int setup(void **state)
{
  (void)state;
  r2s__opt.ring_size = RING;
  return r2s__libc_load();
}

static void test_a_fresh_ring_holds_its_first_pages_only(void **state)
{
  (void)state;
  pair_t p;
  make_pair(&p);
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + FIRST);
  uint8_t out[1000], in[1000];
  fill(out, sizeof out, 0);
  assert_int_equal(put(p.a, out, sizeof out), sizeof out);
  assert_int_equal(get(p.b, in, sizeof in), sizeof in);
  assert_memory_equal(in, out, sizeof out);
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + FIRST);
  drop_pair(&p);
}

/* Moves n more bytes from a to b, checked; *moved counts the stream. */
static void move(pair_t *p, uint64_t *moved, size_t n)
{
  static uint8_t out[16384], in[16384];
  while (n) {
    size_t k = n < sizeof out ? n : sizeof out;
    fill(out, k, *moved);
    assert_int_equal(put(p->a, out, k), k);
    assert_int_equal(get(p->b, in, k), k);
    assert_memory_equal(in, out, k);
    *moved += k, n -= k;
  }
}

static void test_the_rest_is_reserved_in_doubling_steps(void **state)
{
  (void)state;
  pair_t p;
  make_pair(&p);
  uint64_t moved = 0;
  move(&p, &moved, FIRST);
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + FIRST);
  move(&p, &moved, 1);
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + 2 * FIRST);
  move(&p, &moved, 100000);
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + 4 * FIRST);
  drop_pair(&p);
}

static void test_a_stream_past_the_first_part_reserves_the_rest(void **state)
{
  (void)state;
  pair_t p;
  make_pair(&p);
  uint64_t moved = 0;
  move(&p, &moved, 3 * (size_t)RING); /* wraps the ring: every offset used */
  assert_int_equal(held(&p), R2S_RING_CTL_SIZE + RING);
  drop_pair(&p);
}

static void test_a_producer_without_room_for_the_rest_says_enospc(void **state)
{
  (void)state;
  pair_t p;
  make_pair(&p);
  /* Pages past the first part can no longer be had. */
  assert_int_equal(ftruncate(p.fd_b, R2S_RING_CTL_SIZE + FIRST), 0);
  static uint8_t out[FIRST + 4096], in[FIRST + 4096];
  fill(out, sizeof out, 0);
  assert_int_equal(put(p.a, out, 1000), 1000);
  /* What still fits goes, then nothing. */
  assert_int_equal(put(p.a, out + 1000, sizeof out - 1000), FIRST - 1000);
  assert_int_equal(put(p.a, out, 1), -ENOSPC);
  assert_int_equal(get(p.b, in, sizeof in), FIRST);
  assert_memory_equal(in, out, FIRST);
  drop_pair(&p);
}

static void test_a_tail_over_missing_pages_is_a_protocol_error(void **state)
{
  (void)state;
  pair_t p;
  make_pair(&p);
  assert_int_equal(ftruncate(p.fd_b, R2S_RING_CTL_SIZE + FIRST), 0);
  /* A producer that claims bytes past the first part without reserving
   * them: reading them would fault on pages there is no room for. */
  r2s_ring_ctl_t *ctl = mmap(NULL, R2S_RING_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd_b, 0);
  assert_true(ctl != MAP_FAILED);
  __atomic_store_n(&ctl->tail, (uint64_t)FIRST + 8192, __ATOMIC_RELEASE);
  static uint8_t in[FIRST + 8192];
  assert_int_equal(get(p.b, in, sizeof in), -EPROTO);
  munmap(ctl, R2S_RING_CTL_SIZE);
  drop_pair(&p);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_fresh_ring_holds_its_first_pages_only),
      cmocka_unit_test(test_the_rest_is_reserved_in_doubling_steps),
      cmocka_unit_test(test_a_stream_past_the_first_part_reserves_the_rest),
      cmocka_unit_test(test_a_producer_without_room_for_the_rest_says_enospc),
      cmocka_unit_test(test_a_tail_over_missing_pages_is_a_protocol_error),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

/* The transport contract is open: a transport the link has never heard of
 * (transport_loop.c, one file plus one registry line) carries a real TCP
 * connection's bytes, both ways, once both ends switched, and the stream
 * stays exact: every byte in order, the end after the last one. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "conn.h"
#include "libc.h"
#include "link.h"
#include "options.h"

void r2s__loop_enable(bool on);
uint64_t r2s__loop_rings_made(void);

#define STREAM (2u << 20) /* bytes each way: many times the loop's 64 KiB ring */

/* One direction of the test's stream: what went in, what came out and
 * how much of each went through a ring. */
typedef struct dir_s {
  r2s_link_t *tx, *rx;
  int tx_fd, rx_fd;
  uint64_t sent, got, sent_ring, got_ring;
  bool shut, eof;
} dir_t;

/* The byte at offset i of a direction's stream (salt tells them apart). */
static uint8_t pattern(uint64_t i, uint8_t salt)
{
  return (uint8_t)(i * 131 + (i >> 9) + salt);
}

static void tcp_pair(int *c, int *s)
{
  int l = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
  *c = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(*c, (struct sockaddr *)&a, sizeof a), 0);
  *s = accept(l, NULL, NULL);
  assert_true(*s >= 0);
  close(l);
}

/* Moves what can move now in one direction; returns whether anything did. */
static bool step(dir_t *d, uint8_t salt)
{
  bool moved = false;
  uint8_t buf[48 << 10];
  if (d->sent < STREAM) {
    size_t n = sizeof buf < STREAM - d->sent ? sizeof buf : (size_t)(STREAM - d->sent);
    for (size_t i = 0; i < n; i++) buf[i] = pattern(d->sent + i, salt);
    struct iovec v = {buf, n};
    r2s_link_moved_t mv;
    ssize_t k = r2s__link_send(d->tx, d->tx_fd, &v, 1, 0, &mv);
    assert_true(k > 0 || k == -EAGAIN);
    if (k > 0) {
      d->sent += (uint64_t)k, moved = true;
      if (mv.ring) assert_int_equal(mv.ring_path, R2S_PATH_SHM), d->sent_ring += mv.ring;
    }
  } else if (!d->shut) {
    assert_int_equal(r2s__link_shutdown(d->tx, d->tx_fd, SHUT_WR), 0);
    d->shut = moved = true;
  }
  if (!d->eof) {
    struct iovec v = {buf, sizeof buf};
    r2s_link_moved_t mv;
    ssize_t k = r2s__link_recv(d->rx, d->rx_fd, &v, 1, 0, &mv);
    assert_true(k >= 0 || k == -EAGAIN);
    if (k == 0) {
      assert_int_equal(d->got, STREAM); /* the end comes after the last byte, never before */
      d->eof = moved = true;
    } else if (k > 0) {
      for (ssize_t i = 0; i < k; i++)
        if (buf[i] != pattern(d->got + (uint64_t)i, salt)) fail_msg("byte %llu differs", (unsigned long long)(d->got + (uint64_t)i));
      d->got += (uint64_t)k, moved = true;
      if (mv.ring) assert_int_equal(mv.ring_path, R2S_PATH_SHM), d->got_ring += mv.ring;
    }
  }
  return moved;
}

static void test_loop_carries_a_connection(void **state)
{
  (void)state;
  int c, s;
  tcp_pair(&c, &s);
  r2s_policy_t now = {{R2S_UPGRADE_NOW, 0}, R2S_TRANSPORT_AUTO};
  r2s__loop_enable(true);
  r2s_link_t *lc = r2s__link_start(c, &(r2s_link_how_t){.kind = R2S_LINK_CONNECTED, .policy = &now}),
             *ls = r2s__link_start(s, &(r2s_link_how_t){.kind = R2S_LINK_ACCEPTED, .policy = &now});
  assert_non_null(lc);
  assert_non_null(ls);
  dir_t up = {.tx = lc, .rx = ls, .tx_fd = c, .rx_fd = s};
  dir_t down = {.tx = ls, .rx = lc, .tx_fd = s, .rx_fd = c};
  int64_t deadline = r2s__now_ns() + 30ll * 1000000000;
  while (!(up.eof && down.eof) && r2s__now_ns() < deadline) {
    bool a = step(&up, 1), b = step(&down, 2);
    if (!a && !b) {
      /* Nothing moved: the next frame or ring byte comes with the other
       * end's next step; wait for the kernel a little in between. */
      struct pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      (void)poll(p, 2, 1);
    }
  }
  assert_true(up.eof && down.eof);
  /* Both directions went into the test transport's rings, and only its. */
  assert_true(up.sent_ring > 0 && up.got_ring > 0);
  assert_true(down.sent_ring > 0 && down.got_ring > 0);
  assert_int_equal(r2s__loop_rings_made(), 2);
  int why;
  r2s__link_info(lc, NULL, NULL, &why);
  assert_int_equal(why, R2S_REASON_NONE);
  r2s__loop_enable(false);
  r2s__link_free(lc), r2s__link_free(ls);
  close(c), close(s);
}

/* Without it (rank 0) the registry's choice is what it always was: the
 * loop transport makes no ring. */
static void test_loop_not_chosen_unless_enabled(void **state)
{
  (void)state;
  int c, s;
  tcp_pair(&c, &s);
  uint64_t before = r2s__loop_rings_made();
  r2s_policy_t now = {{R2S_UPGRADE_NOW, 0}, R2S_TRANSPORT_AUTO};
  r2s_link_t *lc = r2s__link_start(c, &(r2s_link_how_t){.kind = R2S_LINK_CONNECTED, .policy = &now}),
             *ls = r2s__link_start(s, &(r2s_link_how_t){.kind = R2S_LINK_ACCEPTED, .policy = &now});
  dir_t up = {.tx = lc, .rx = ls, .tx_fd = c, .rx_fd = s};
  for (int i = 0; i < 200 && up.got < 4096; i++) {
    step(&up, 3);
    struct pollfd p = {s, POLLIN, 0};
    (void)poll(&p, 1, 1);
  }
  assert_true(up.got > 0);
  assert_int_equal(r2s__loop_rings_made(), before);
  r2s__link_free(lc), r2s__link_free(ls);
  close(c), close(s);
}

static int setup(void **state)
{
  (void)state;
  if (r2s__libc_load() < 0) return -1;
  r2s__options_load();
  return 0;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loop_carries_a_connection),
      cmocka_unit_test(test_loop_not_chosen_unless_enabled),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

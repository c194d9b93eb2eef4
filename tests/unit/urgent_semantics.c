/* The kernel behaviour of TCP urgent data that the upgrade protocol
 * (docs/protocol.md) relies on. If a kernel behaves differently, this test
 * fails here instead of a connection corrupting a stream for a user. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

typedef struct {
  int client, server;
} pair_t;

static pair_t make_pair(void)
{
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
  pair_t p = {socket(AF_INET, SOCK_STREAM, 0), -1};
  assert_int_equal(connect(p.client, (struct sockaddr *)&a, sizeof a), 0);
  p.server = accept(l, NULL, NULL);
  assert_true(p.server >= 0);
  close(l);
  return p;
}

static void close_pair(pair_t p)
{
  close(p.client);
  close(p.server);
}

/* Waits (bounded) until fd reports all of `events`; returns revents. */
static short wait_for(int fd, short events)
{
  struct pollfd pfd = {fd, (short)(POLLIN | POLLPRI), 0};
  for (int i = 0; i < 100; i++) {
    assert_true(poll(&pfd, 1, 50) >= 0);
    if ((pfd.revents & events) == events) return pfd.revents;
  }
  fail_msg("fd %d never reported events 0x%x (last 0x%x)", fd, events, pfd.revents);
  return 0;
}

static int atmark(int fd)
{
  int v = -1;
  assert_int_equal(ioctl(fd, SIOCATMARK, &v), 0);
  return v;
}

static void send_urgent(int fd, char c)
{
  assert_int_equal(send(fd, &c, 1, MSG_OOB), 1);
}

static void send_str(int fd, const char *s)
{
  assert_int_equal(send(fd, s, strlen(s), 0), (ssize_t)strlen(s));
}

/* Returns the urgent byte (peeked or read), or -errno. */
static int oob(int fd, int flags)
{
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_OOB | MSG_DONTWAIT | flags);
  return n == 1 ? (unsigned char)c : -errno;
}

static void expect_recv(int fd, int flags, const char *want)
{
  char buf[64];
  ssize_t n = recv(fd, buf, sizeof buf, flags | MSG_DONTWAIT);
  assert_int_equal(n, (ssize_t)strlen(want));
  assert_memory_equal(buf, want, strlen(want));
}

/* The hello at position 0 is out of the stream and its mark is at 0. */
static void test_hello_then_data(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_urgent(p.client, 'H');
  send_str(p.client, "abc");
  wait_for(p.server, POLLIN | POLLPRI);
  assert_int_equal(atmark(p.server), 1);
  expect_recv(p.server, MSG_PEEK, "abc");
  assert_int_equal(oob(p.server, MSG_PEEK), 'H');
  expect_recv(p.server, 0, "abc");
  assert_int_equal(atmark(p.server), 0);
  close_pair(p);
}

/* A lone urgent byte is POLLPRI but not readable. */
static void test_lone_hello_not_readable(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_urgent(p.client, 'H');
  short rev = wait_for(p.server, POLLPRI);
  assert_false(rev & POLLIN);
  char c;
  assert_int_equal(recv(p.server, &c, 1, MSG_PEEK | MSG_DONTWAIT), -1);
  assert_int_equal(errno, EAGAIN);
  assert_int_equal(atmark(p.server), 1);
  close_pair(p);
}

/* The switch mark arrives when the reader is at the end: a peek returns the
 * frame bytes after the mark, and SIOCATMARK afterwards says so. */
static void test_mark_at_reader_position_detected_after_peek(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_str(p.client, "abc");
  wait_for(p.server, POLLIN);
  expect_recv(p.server, 0, "abc");
  send_urgent(p.client, 'U');
  send_str(p.client, "FRAME");
  wait_for(p.server, POLLIN | POLLPRI);
  expect_recv(p.server, MSG_PEEK, "FRAME");
  assert_int_equal(atmark(p.server), 1);
  assert_int_equal(oob(p.server, MSG_PEEK), 'U');
  close_pair(p);
}

/* Only the latest urgent byte is kept; the older one vanishes from the
 * stream, and reads stop exactly at the newer mark. */
static void test_later_mark_replaces_hello(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_urgent(p.client, 'H');
  send_str(p.client, "d1");
  send_urgent(p.client, 'U');
  send_str(p.client, "d2");
  wait_for(p.server, POLLIN | POLLPRI);
  expect_recv(p.server, MSG_PEEK, "d1");
  assert_int_equal(atmark(p.server), 0);
  assert_int_equal(oob(p.server, MSG_PEEK), 'U'); /* visible before the mark */
  expect_recv(p.server, 0, "d1");
  assert_int_equal(atmark(p.server), 1);
  expect_recv(p.server, 0, "d2");
  close_pair(p);
}

/* The trap: a read that starts at the mark skips the urgent byte, returns
 * what follows as data and forgets the urgent state. */
static void test_blind_read_at_mark_forgets_it(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_urgent(p.client, 'U');
  send_str(p.client, "FR");
  wait_for(p.server, POLLIN | POLLPRI);
  expect_recv(p.server, 0, "FR");
  assert_int_equal(atmark(p.server), 0);
  assert_int_equal(oob(p.server, 0), -EINVAL);
  close_pair(p);
}

/* Peeked bytes in front of a mark can be consumed exactly, even if the
 * urgent byte arrives between the peek and the read. */
static void test_consume_exactly_what_was_peeked(void **state)
{
  (void)state;
  pair_t p = make_pair();
  send_str(p.client, "app");
  wait_for(p.server, POLLIN);
  char buf[16];
  assert_int_equal(recv(p.server, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT), 3);
  assert_int_equal(atmark(p.server), 0);
  send_urgent(p.client, 'U'); /* arrives after the peek */
  send_str(p.client, "FR");
  wait_for(p.server, POLLPRI);
  assert_int_equal(recv(p.server, buf, 3, MSG_DONTWAIT), 3);
  assert_memory_equal(buf, "app", 3);
  assert_int_equal(atmark(p.server), 1); /* the mark is still there to find */
  assert_int_equal(oob(p.server, 0), 'U');
  expect_recv(p.server, 0, "FR");
  close_pair(p);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_then_data),
      cmocka_unit_test(test_lone_hello_not_readable),
      cmocka_unit_test(test_mark_at_reader_position_detected_after_peek),
      cmocka_unit_test(test_later_mark_replaces_hello),
      cmocka_unit_test(test_blind_read_at_mark_forgets_it),
      cmocka_unit_test(test_consume_exactly_what_was_peeked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

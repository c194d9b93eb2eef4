/*
 * rr_check: request/response over short connections, one after another, as
 * HTTP/1.0 clients, health checks and connection-per-query programs do.
 * Each connection carries one verified request and one verified response
 * (or --rounds of them, as a short keep-alive does; with --server-first
 * the server speaks first, as SMTP or FTP servers greet) and then ends: by default the client closes first and the server reads
 * the end of the stream before it closes; with --server-closes the server
 * closes after its response and the client reads the end of the stream.
 * Both orders matter to a shim: the end that closes second closes a
 * connection whose peer may already have torn its transport down.
 *
 * Prints the median and the slowest connection (a figure to read, never
 * asserted). Exit status: 0 when every byte of every connection was
 * verified and every end of stream came where it should, 1 on any failure,
 * 2 on bad usage, 3 on timeout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sc_net.h"
#include "sc_util.h"

#define MAX_CONNS 100000
#define MAX_BYTES (1u << 20)

struct opts {
  bool server, server_closes, server_first;
  const char *host;
  int port, ready_fd;
  unsigned conns, rounds, timeout;
  uint32_t bytes;
  uint64_t seed;
};

static void usage(void)
{
  fprintf(stderr, "usage: rr_check server [--host ADDR (127.0.0.1)] [--port P] [--ready-fd FD] [--conns N]\n"
                  "                       [--bytes B] [--rounds R] [--server-closes] [--server-first]\n"
                  "                       [--seed S] [--timeout S]\n"
                  "       rr_check client [--host ADDR] --port P [--conns N]\n"
                  "                       [--bytes B] [--rounds R] [--server-closes] [--server-first]\n"
                  "                       [--seed S] [--timeout S]\n"
                  "  Both ends need the same options but --host, --port, --ready-fd and --timeout.\n");
  exit(SC_EXIT_USAGE);
}

static void parse(int argc, char **argv, struct opts *o)
{
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},    {"port", required_argument, NULL, 'p'},
      {"ready-fd", required_argument, NULL, 'r'}, {"conns", required_argument, NULL, 'c'},
      {"bytes", required_argument, NULL, 'b'},   {"server-closes", no_argument, NULL, 'S'},
      {"seed", required_argument, NULL, 's'},    {"timeout", required_argument, NULL, 't'},
      {"rounds", required_argument, NULL, 'n'},  {"server-first", no_argument, NULL, 'F'},
      {NULL, 0, NULL, 0},
  };
  long v;
  uint64_t size;
  int c;
  *o = (struct opts){.host = "127.0.0.1", .port = -1, .ready_fd = -1, .conns = 100, .rounds = 1, .timeout = 60, .bytes = 64, .seed = 1};
  if (argc < 2) usage();
  if (strcmp(argv[1], "server") == 0)
    o->server = true;
  else if (strcmp(argv[1], "client") != 0)
    usage();
  optind = 2;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      o->host = optarg;
      break;
    case 'p':
      if (sc_parse_int(optarg, 0, 65535, &v) != 0) usage();
      o->port = (int)v;
      break;
    case 'r':
      if (sc_parse_int(optarg, 0, 1 << 20, &v) != 0) usage();
      o->ready_fd = (int)v;
      break;
    case 'c':
      if (sc_parse_int(optarg, 1, MAX_CONNS, &v) != 0) usage();
      o->conns = (unsigned)v;
      break;
    case 'b':
      if (sc_parse_size(optarg, &size) != 0 || size < 1 || size > MAX_BYTES) usage();
      o->bytes = (uint32_t)size;
      break;
    case 'n':
      if (sc_parse_int(optarg, 1, 1000000, &v) != 0) usage();
      o->rounds = (unsigned)v;
      break;
    case 'S':
      o->server_closes = true;
      break;
    case 'F':
      o->server_first = true;
      break;
    case 's':
      errno = 0;
      o->seed = strtoull(optarg, NULL, 0);
      if (errno) usage();
      break;
    case 't':
      if (sc_parse_int(optarg, 1, 86400, &v) != 0) usage();
      o->timeout = (unsigned)v;
      break;
    default:
      usage();
    }
  }
  if (optind != argc || (!o->server && o->port <= 0)) usage();
}

/* The bytes of exchange i in one direction (0: the client's, the request;
 * 1: the server's, the response). */
static void pattern(const struct opts *o, uint64_t i, int dir, uint8_t *buf)
{
  uint64_t key = sc_mix64(o->seed ^ (i << 1 | (uint64_t)dir));
  for (uint32_t j = 0; j < o->bytes; j += 8) {
    uint64_t w = sc_mix64(key + j);
    uint32_t n = o->bytes - j < 8 ? o->bytes - j : 8;
    memcpy(buf + j, &w, n);
  }
}

static int write_all(int fd, const uint8_t *p, uint32_t n)
{
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? -errno : -EPIPE;
    p += k, n -= (uint32_t)k;
  }
  return 0;
}

/* Reads exactly n bytes; -ENODATA if the stream ended first. */
static int read_all(int fd, uint8_t *p, uint32_t n)
{
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return -ENODATA;
    p += k, n -= (uint32_t)k;
  }
  return 0;
}

/* The peer's end of stream must come next, and nothing before it. */
static int read_eof(int fd)
{
  uint8_t c;
  for (;;) {
    ssize_t k = read(fd, &c, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    return k == 0 ? 0 : -EPROTO;
  }
}

/* Receives exchange x's bytes (on connection i) in direction dir and
 * compares them. */
static void expect(const struct opts *o, int fd, unsigned i, uint64_t x, int dir, uint8_t *want, uint8_t *got)
{
  const char *who = o->server ? "server" : "client", *what = dir ? "response" : "request";
  int rc = read_all(fd, got, o->bytes);
  if (rc)
    sc_die(SC_EXIT_FAIL, "rr_check %s: FAIL conn %u: reading the %s: %s", who, i, what,
           rc == -ENODATA ? "the stream ended first" : strerror(-rc));
  pattern(o, x, dir, want);
  for (uint32_t j = 0; j < o->bytes; j++)
    if (got[j] != want[j])
      sc_die(SC_EXIT_FAIL, "rr_check %s: FAIL conn %u: %s byte %" PRIu32 " is %#x, expected %#x", who, i, what, j,
             got[j], want[j]);
}

static void send_dir(const struct opts *o, int fd, unsigned i, uint64_t x, int dir, uint8_t *buf)
{
  pattern(o, x, dir, buf);
  int rc = write_all(fd, buf, o->bytes);
  if (rc)
    sc_die(SC_EXIT_FAIL, "rr_check %s: FAIL conn %u: sending the %s: %s", o->server ? "server" : "client", i,
           dir ? "response" : "request", strerror(-rc));
}

static void end_of_stream(const struct opts *o, int fd, unsigned i)
{
  int rc = read_eof(fd);
  if (rc)
    sc_die(SC_EXIT_FAIL, "rr_check %s: FAIL conn %u: expected the end of the stream, got %s",
           o->server ? "server" : "client", i, rc == -EPROTO ? "more bytes" : strerror(-rc));
}

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void one(const struct opts *o, int fd, unsigned i, uint8_t *a, uint8_t *b)
{
  for (unsigned r = 0; r < o->rounds; r++) {
    uint64_t x = (uint64_t)i * o->rounds + r;
    if (o->server == o->server_first) { /* this end speaks first */
      send_dir(o, fd, i, x, o->server, a);
      expect(o, fd, i, x, !o->server, a, b);
    } else {
      expect(o, fd, i, x, !o->server, a, b);
      send_dir(o, fd, i, x, o->server, a);
    }
  }
  if (o->server != o->server_closes) end_of_stream(o, fd, i);
  if (close(fd) != 0)
    sc_die(SC_EXIT_FAIL, "rr_check %s: FAIL conn %u: close: %s", o->server ? "server" : "client", i, strerror(errno));
}

int main(int argc, char **argv)
{
  struct opts o;
  parse(argc, argv, &o);
  const char *who = o.server ? "server" : "client";
  sc_watchdog(o.server ? "rr_check server" : "rr_check client", o.timeout);
  uint8_t *a = malloc(o.bytes), *b = malloc(o.bytes);
  double *ms = calloc(o.conns, sizeof *ms);
  if (!a || !b || !ms) sc_die(SC_EXIT_FAIL, "rr_check %s: out of memory", who);

  int lfd = -1;
  if (o.server) {
    int port = 0;
    lfd = sc_listen(o.host, o.port < 0 ? 0 : o.port, false, &port);
    if (lfd < 0) sc_die(SC_EXIT_FAIL, "rr_check server: listen: %s", strerror(-lfd));
    if (o.ready_fd >= 0 && sc_report_port(o.ready_fd, port) != 0)
      sc_die(SC_EXIT_FAIL, "rr_check server: cannot report the port");
  }
  for (unsigned i = 0; i < o.conns; i++) {
    double t0 = now_ms();
    int fd;
    if (o.server) {
      while ((fd = accept(lfd, NULL, NULL)) < 0 && errno == EINTR) {
      }
      if (fd < 0) sc_die(SC_EXIT_FAIL, "rr_check server: FAIL accept %u: %s", i, strerror(errno));
    } else {
      bool in_progress = false;
      fd = sc_connect(o.host, o.port, false, &in_progress);
      if (fd < 0) sc_die(SC_EXIT_FAIL, "rr_check client: FAIL connect %u: %s", i, strerror(-fd));
    }
    one(&o, fd, i, a, b);
    ms[i] = now_ms() - t0;
  }
  if (lfd >= 0) close(lfd);
  qsort(ms, o.conns, sizeof *ms, cmp_double);
  printf("rr_check %s: OK conns=%u/%u verified=%" PRIu64 " order=%s median_ms=%.3f max_ms=%.3f\n", who, o.conns,
         o.conns, (uint64_t)o.conns * o.rounds * o.bytes, o.server_closes ? "server-closes" : "client-closes",
         ms[o.conns / 2], ms[o.conns - 1]);
  free(a), free(b), free(ms);
  return SC_EXIT_OK;
}

/*
 * stream_check: a client and a server that move a verified pseudo-random
 * stream (see sc_stream.h) in one of three I/O styles (see sc_drive.h), to
 * test a socket shim byte for byte. Exit status: 0 when every byte of every
 * connection was verified, 1 on any failure, 2 on bad usage, 3 on timeout,
 * 77 when IPv6 is unavailable for --v6.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sc_drive.h"
#include "sc_net.h"
#include "sc_stream.h"
#include "sc_util.h"

#define MAX_CONNS 1024

struct opts {
  bool server;
  const char *host;
  int port;
  bool v6;
  enum sc_mode mode;
  unsigned conns;
  int ready_fd;
  unsigned timeout;
  struct sc_params p;
  bool reply_set;
  uint64_t rate;
};

static noreturn void usage(void)
{
  fprintf(stderr, "usage: stream_check server [--host ADDR] [--port P] [--v6] [--mode M]\n"
                  "                           [--once | --conns N] [--ready-fd FD] [--timeout S]\n"
                  "       stream_check client [--host ADDR] --port P [--bytes N] [--reply-bytes N]\n"
                  "                           [--seed S] [--mode M] [--conns N] [--halfclose] [--bidir]\n"
                  "                           [--zero-reads] [--timeout S]\n"
                  "       either: [--rate N] (with --mode block)\n"
                  "  M: block | nonblock-epoll-et | poll (default block); sizes take K, M, G.\n"
                  "  --v6: listen on an IPv6 dual-stack socket (default host ::).\n"
                  "  --ready-fd: write the listening port to FD once listening (--port 0 picks one).\n"
                  "  --reply-bytes: server-to-client bytes (default: --bytes).\n"
                  "  --zero-reads: both ends slip a read of no bytes before each read (sc_io.h).\n"
                  "  --rate: this end sends at most N bytes a second on each connection, on average\n"
                  "          since its first write (one held up catches up at full speed): a stream\n"
                  "          that lasts about its length divided by N, e.g. to span an outage.\n");
  exit(SC_EXIT_USAGE);
}

static void parse(int argc, char **argv, struct opts *o)
{
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"port", required_argument, NULL, 'p'},
      {"v6", no_argument, NULL, '6'},
      {"mode", required_argument, NULL, 'm'},
      {"once", no_argument, NULL, '1'},
      {"conns", required_argument, NULL, 'c'},
      {"ready-fd", required_argument, NULL, 'r'},
      {"timeout", required_argument, NULL, 't'},
      {"bytes", required_argument, NULL, 'b'},
      {"reply-bytes", required_argument, NULL, 'R'},
      {"seed", required_argument, NULL, 's'},
      {"halfclose", no_argument, NULL, 'h'},
      {"bidir", no_argument, NULL, 'B'},
      {"zero-reads", no_argument, NULL, 'z'},
      {"rate", required_argument, NULL, 'T'},
      {NULL, 0, NULL, 0},
  };
  long v;
  int c;

  *o = (struct opts){
      .port = -1, .conns = 1, .ready_fd = -1, .timeout = 60, .p = {.seed = 1, .c2s_bytes = 8 << 20}};
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
    case '6':
      o->v6 = true;
      break;
    case 'm':
      if (sc_mode_parse(optarg, &o->mode) != 0) usage();
      break;
    case '1':
      o->conns = 1;
      break;
    case 'c':
      if (sc_parse_int(optarg, 1, MAX_CONNS, &v) != 0) usage();
      o->conns = (unsigned)v;
      break;
    case 'r':
      if (sc_parse_int(optarg, 0, 1 << 20, &v) != 0) usage();
      o->ready_fd = (int)v;
      break;
    case 't':
      if (sc_parse_int(optarg, 1, 86400, &v) != 0) usage();
      o->timeout = (unsigned)v;
      break;
    case 'b':
      if (sc_parse_size(optarg, &o->p.c2s_bytes) != 0) usage();
      break;
    case 'R':
      if (sc_parse_size(optarg, &o->p.s2c_bytes) != 0) usage();
      o->reply_set = true;
      break;
    case 's':
      errno = 0;
      o->p.seed = strtoull(optarg, NULL, 0);
      if (errno) usage();
      break;
    case 'h':
      o->p.flags |= SC_F_HALFCLOSE;
      break;
    case 'B':
      o->p.flags |= SC_F_BIDIR;
      break;
    case 'z':
      o->p.flags |= SC_F_ZERO_READS;
      break;
    case 'T':
      if (sc_parse_size(optarg, &o->rate) != 0 || o->rate == 0) usage();
      break;
    default:
      usage();
    }
  }
  if (optind != argc || (!o->server && o->port <= 0) || (o->rate && o->mode != SC_MODE_BLOCK)) usage();
  if (o->port < 0) o->port = 0;
  if (!o->reply_set) o->p.s2c_bytes = o->p.c2s_bytes;
  if (!o->host && !o->server) o->host = "127.0.0.1";
}

static const char *flags_name(uint32_t flags)
{
  static const char *const names[] = {"none",       "halfclose",       "bidir",       "halfclose,bidir",
                                      "zero-reads", "halfclose,zero-reads", "bidir,zero-reads",
                                      "halfclose,bidir,zero-reads"};
  return names[flags & 7];
}

/* Prints the one-line summary (and each failed connection's reason) and
 * returns the exit status. */
static int report(const struct opts *o, sc_session_t **sessions, unsigned n, int run_rc)
{
  uint64_t verified = 0, sent = 0;
  unsigned ok = 0, peers[4] = {0};
  uint32_t flags = o->p.flags;

  for (unsigned i = 0; i < n; i++) {
    sc_session_t *s = sessions[i];
    const char *err = sc_session_error(s);
    if (err[0]) {
      fprintf(stderr, "stream_check %s: conn %u: %s\n", o->server ? "server" : "client", s->id, err);
    } else {
      ok++;
    }
    verified += s->rx_data_bytes;
    sent += s->tx_data_bytes;
    peers[s->peer]++;
    if (o->server && s->hdr_known) flags = s->p.flags;
  }
  bool pass = run_rc == 0 && ok == o->conns && n == o->conns;
  int leaked = sc_count_tcp_fds();
  if (leaked != 0) {
    fprintf(stderr, "stream_check: %d TCP sockets still open at exit%s\n", leaked,
            leaked < 0 ? " (could not check)" : "");
    pass = false;
  }
  printf("stream_check %s: %s mode=%s conns=%u/%u verified=%" PRIu64 " sent=%" PRIu64 " flags=%s",
         o->server ? "server" : "client", pass ? "OK" : "FAIL", sc_mode_name(o->mode), ok, o->conns, verified,
         sent, flags_name(flags));
  if (o->server)
    printf(" peers=v4:%u,v6:%u,v4mapped:%u", peers[SC_PEER_V4], peers[SC_PEER_V6], peers[SC_PEER_V4MAPPED]);
  else
    printf(" seed=%" PRIu64, o->p.seed);
  printf("\n");
  return pass ? SC_EXIT_OK : SC_EXIT_FAIL;
}

struct job {
  pthread_t tid;
  sc_session_t *s;
  const struct opts *o;
  unsigned id;
  int rc;
};

static void *client_job(void *arg)
{
  struct job *j = arg;
  bool in_progress;
  int fd = sc_connect(j->o->host, j->o->port, false, &in_progress);

  if (fd < 0) {
    sc_tx_fail(j->s, "connect to %s port %d: %s", j->o->host, j->o->port, strerror(-fd));
    j->rc = -1;
    return NULL;
  }
  j->s->fd = fd;
  j->rc = sc_block_run(j->s);
  return NULL;
}

static void *server_job(void *arg)
{
  struct job *j = arg;
  j->rc = sc_block_run(j->s);
  return NULL;
}

/* Blocking style: one thread per connection. The server accepts on this
 * thread and hands each socket to a new one. */
static int run_blocking(const struct opts *o, int lfd, sc_session_t **sessions, unsigned *n)
{
  struct job *jobs = calloc(o->conns, sizeof(*jobs));
  unsigned started = 0;
  int rc = 0;

  if (!jobs) sc_die(SC_EXIT_FAIL, "out of memory");
  for (unsigned i = 0; i < o->conns; i++) {
    struct job *j = &jobs[i];
    struct sc_params p = o->p;
    int fd = -1;

    if (o->server) {
      do fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      while (fd < 0 && (errno == EINTR || errno == ECONNABORTED));
      if (fd < 0) {
        fprintf(stderr, "stream_check: accept4: %s\n", strerror(errno));
        rc = -1;
        break;
      }
    }
    p.seed = o->p.seed + i;
    j->o = o;
    j->id = i;
    j->s = sc_session_new(o->server ? SC_SERVER : SC_CLIENT, fd, i, &p);
    if (!j->s) sc_die(SC_EXIT_FAIL, "out of memory");
    j->s->tx_rate = o->rate;
    if (o->server) j->s->peer = sc_peer_kind(fd);
    sessions[(*n)++] = j->s;
    int err = pthread_create(&j->tid, NULL, o->server ? server_job : client_job, j);
    if (err != 0) {
      sc_tx_fail(j->s, "pthread_create: %s", strerror(err));
      if (fd >= 0) close(fd);
      rc = -1;
      break;
    }
    started++;
  }
  for (unsigned i = 0; i < started; i++) {
    int err = pthread_join(jobs[i].tid, NULL);
    if (err != 0) sc_die(SC_EXIT_FAIL, "pthread_join: %s", strerror(err));
    if (jobs[i].rc != 0) rc = -1;
  }
  free(jobs);
  return rc;
}

/* Event-loop styles: every connection in one loop on this thread; a client
 * connects non-blocking and lets the loop finish the handshake. */
static int run_loop(const struct opts *o, int lfd, sc_session_t **sessions, unsigned *n)
{
  bool *connecting = calloc(o->conns, sizeof(*connecting));
  struct sc_loop loop = {.mode = o->mode, .sessions = sessions, .listen_fd = -1};
  int rc;

  if (!connecting) sc_die(SC_EXIT_FAIL, "out of memory");
  if (o->server) {
    loop.listen_fd = lfd;
    loop.accept_count = o->conns;
  } else {
    for (unsigned i = 0; i < o->conns; i++) {
      struct sc_params p = o->p;
      int fd = sc_connect(o->host, o->port, true, &connecting[i]);
      if (fd < 0) sc_die(SC_EXIT_FAIL, "connect to %s port %d: %s", o->host, o->port, strerror(-fd));
      p.seed = o->p.seed + i;
      sessions[i] = sc_session_new(SC_CLIENT, fd, i, &p);
      if (!sessions[i]) sc_die(SC_EXIT_FAIL, "out of memory");
    }
    loop.nsessions = o->conns;
    loop.connecting = connecting;
  }
  rc = sc_loop_run(&loop);
  *n = loop.nsessions;
  free(connecting);
  return rc;
}

int main(int argc, char **argv)
{
  struct opts o;
  int lfd = -1, rc;
  unsigned n = 0;

  parse(argc, argv, &o);
  sc_watchdog(o.server ? "stream_check server" : "stream_check client", o.timeout);
  if (o.server) {
    int port;
    lfd = sc_listen(o.host, o.port, o.v6, &port);
    if (lfd < 0) {
      bool no_v6 = o.v6 && (lfd == -EAFNOSUPPORT || lfd == -EADDRNOTAVAIL);
      sc_die(no_v6 ? SC_EXIT_SKIP : SC_EXIT_FAIL, "listen on %s port %d: %s%s",
             o.host ? o.host : (o.v6 ? "::" : "127.0.0.1"), o.port, strerror(-lfd),
             no_v6 ? " (no IPv6 here: skipped)" : "");
    }
    if (o.ready_fd >= 0 && (rc = sc_report_port(o.ready_fd, port)) < 0)
      sc_die(SC_EXIT_FAIL, "writing the port to fd %d: %s", o.ready_fd, strerror(-rc));
  }
  sc_session_t **sessions = calloc(o.conns, sizeof(*sessions));
  if (!sessions) sc_die(SC_EXIT_FAIL, "out of memory");
  rc = o.mode == SC_MODE_BLOCK ? run_blocking(&o, lfd, sessions, &n) : run_loop(&o, lfd, sessions, &n);
  if (lfd >= 0 && close(lfd) != 0) sc_die(SC_EXIT_FAIL, "close(listener): %s", strerror(errno));
  int status = report(&o, sessions, n, rc);
  for (unsigned i = 0; i < n; i++) sc_session_free(sessions[i]);
  free(sessions);
  return status;
}

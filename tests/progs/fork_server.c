/*
 * fork_server: a forking TCP server for the verified stream of sc_stream.h.
 * The parent listens and accepts; for each connection it fork()s a child that
 * serves it and closes its own copy of the socket at once, so the connection
 * lives on in the child alone. With --exec the child instead execv()s
 * /proc/self/exe with the socket's fd number on the command line
 * (--serve-fd), and the new image serves the inherited socket.
 * stream_check client is the peer. Exit status: 0 when every child served
 * its connection with every byte verified, 1 otherwise, 2 on bad usage, 3 on
 * timeout, 77 when IPv6 is unavailable for --v6.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sc_drive.h"
#include "sc_net.h"
#include "sc_stream.h"
#include "sc_util.h"

#define MAX_CONNS 256

struct opts {
  const char *host;
  int port;
  bool v6;
  unsigned conns;
  enum sc_mode mode;
  bool exec;
  int ready_fd;
  unsigned timeout;
  int serve_fd; /* >= 0: we are the exec()ed child */
};

static noreturn void usage(void)
{
  fprintf(stderr, "usage: fork_server [--host ADDR] [--port P] [--v6] [--conns N] [--mode M]\n"
                  "                   [--exec] [--ready-fd FD] [--timeout S]\n"
                  "  M: block | nonblock-epoll-et | poll, used by each child.\n"
                  "  --exec: each child execs this program to serve the inherited socket.\n"
                  "  (internal: fork_server --serve-fd FD [--mode M] [--timeout S])\n");
  exit(SC_EXIT_USAGE);
}

static void parse(int argc, char **argv, struct opts *o)
{
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"port", required_argument, NULL, 'p'},
      {"v6", no_argument, NULL, '6'},
      {"conns", required_argument, NULL, 'c'},
      {"mode", required_argument, NULL, 'm'},
      {"exec", no_argument, NULL, 'x'},
      {"ready-fd", required_argument, NULL, 'r'},
      {"timeout", required_argument, NULL, 't'},
      {"serve-fd", required_argument, NULL, 'S'},
      {NULL, 0, NULL, 0},
  };
  long v;
  int c;

  *o = (struct opts){.conns = 1, .ready_fd = -1, .timeout = 60, .serve_fd = -1};
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
    case 'c':
      if (sc_parse_int(optarg, 1, MAX_CONNS, &v) != 0) usage();
      o->conns = (unsigned)v;
      break;
    case 'm':
      if (sc_mode_parse(optarg, &o->mode) != 0) usage();
      break;
    case 'x':
      o->exec = true;
      break;
    case 'r':
      if (sc_parse_int(optarg, 0, 1 << 20, &v) != 0) usage();
      o->ready_fd = (int)v;
      break;
    case 't':
      if (sc_parse_int(optarg, 1, 86400, &v) != 0) usage();
      o->timeout = (unsigned)v;
      break;
    case 'S':
      if (sc_parse_int(optarg, 0, 1 << 20, &v) != 0) usage();
      o->serve_fd = (int)v;
      break;
    default:
      usage();
    }
  }
  if (optind != argc) usage();
}

/* Serves one accepted connection in this process; returns the exit status. */
static int serve(int fd, enum sc_mode mode, bool execed)
{
  sc_session_t *s = sc_session_new(SC_SERVER, fd, 0, NULL);
  if (!s) sc_die(SC_EXIT_FAIL, "out of memory");
  s->peer = sc_peer_kind(fd);
  int rc;
  if (mode == SC_MODE_BLOCK) {
    rc = sc_block_run(s);
  } else {
    struct sc_loop loop = {.mode = mode, .sessions = &s, .nsessions = 1, .listen_fd = -1};
    rc = sc_loop_run(&loop);
  }
  const char *err = sc_session_error(s);
  if (err[0]) fprintf(stderr, "fork_server child[%ld]: %s\n", (long)getpid(), err);
  int leaked = sc_count_tcp_fds();
  if (leaked != 0)
    fprintf(stderr, "fork_server child[%ld]: %d TCP sockets still open at exit\n", (long)getpid(), leaked);
  bool pass = rc == 0 && !err[0] && leaked == 0;
  printf("fork_server child[%ld]: %s mode=%s exec=%s verified=%" PRIu64 " sent=%" PRIu64 " peer=%s\n",
         (long)getpid(), pass ? "OK" : "FAIL", sc_mode_name(mode), execed ? "yes" : "no", s->rx_data_bytes,
         s->tx_data_bytes, sc_peer_kind_name(s->peer));
  sc_session_free(s);
  return pass ? SC_EXIT_OK : SC_EXIT_FAIL;
}

/* An exec()ed child checks that what it inherited is the connected TCP
 * socket, not a stale number, before serving it. */
static void check_inherited(int fd)
{
  struct stat st;
  int type;
  socklen_t len = sizeof(type);

  if (fstat(fd, &st) != 0) sc_die(SC_EXIT_FAIL, "inherited fd %d: %s", fd, strerror(errno));
  if (!S_ISSOCK(st.st_mode)) sc_die(SC_EXIT_FAIL, "inherited fd %d is not a socket", fd);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    sc_die(SC_EXIT_FAIL, "inherited fd %d is not a stream socket", fd);
  if (sc_peer_kind(fd) == SC_PEER_OTHER) sc_die(SC_EXIT_FAIL, "inherited fd %d has no TCP peer", fd);
}

static noreturn void exec_child(const struct opts *o, int fd)
{
  char fdarg[16], tmo[16];
  int fl = fcntl(fd, F_GETFD);

  /* The socket was accepted close-on-exec so that no other child inherits
   * it; this child is the one that must. */
  if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) != 0)
    sc_die(SC_EXIT_FAIL, "fcntl(F_SETFD): %s", strerror(errno));
  snprintf(fdarg, sizeof(fdarg), "%d", fd);
  snprintf(tmo, sizeof(tmo), "%u", o->timeout);
  char *argv[] = {"fork_server", "--serve-fd", fdarg, "--mode", (char *)sc_mode_name(o->mode),
                  "--timeout",   tmo,          NULL};
  execv("/proc/self/exe", argv);
  sc_die(SC_EXIT_FAIL, "execv(/proc/self/exe): %s", strerror(errno));
}

static bool child_ok(pid_t pid, int status)
{
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (WIFEXITED(status))
    fprintf(stderr, "fork_server: child %ld exited with status %d\n", (long)pid, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    fprintf(stderr, "fork_server: child %ld killed by signal %d\n", (long)pid, WTERMSIG(status));
  return false;
}

int main(int argc, char **argv)
{
  struct opts o;
  int port, rc;

  parse(argc, argv, &o);
  if (o.serve_fd >= 0) {
    sc_watchdog("fork_server exec child", o.timeout);
    check_inherited(o.serve_fd);
    return serve(o.serve_fd, o.mode, true);
  }
  sc_watchdog("fork_server", o.timeout);
  int lfd = sc_listen(o.host, o.port, o.v6, &port);
  if (lfd < 0) {
    bool no_v6 = o.v6 && (lfd == -EAFNOSUPPORT || lfd == -EADDRNOTAVAIL);
    sc_die(no_v6 ? SC_EXIT_SKIP : SC_EXIT_FAIL, "listen: %s%s", strerror(-lfd),
           no_v6 ? " (no IPv6 here: skipped)" : "");
  }
  if (o.ready_fd >= 0 && (rc = sc_report_port(o.ready_fd, port)) < 0)
    sc_die(SC_EXIT_FAIL, "writing the port to fd %d: %s", o.ready_fd, strerror(-rc));

  pid_t pids[MAX_CONNS];
  unsigned forked = 0;
  for (unsigned i = 0; i < o.conns; i++) {
    int fd;
    do fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    while (fd < 0 && (errno == EINTR || errno == ECONNABORTED));
    if (fd < 0) {
      fprintf(stderr, "fork_server: accept4: %s\n", strerror(errno));
      break;
    }
    /* Whatever stdio holds must not be written twice by parent and child. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "fork_server: fork: %s\n", strerror(errno));
      close(fd);
      break;
    }
    if (pid == 0) {
      /* fork() cancels a pending alarm: re-arm the child's own. */
      alarm(o.timeout);
      if (close(lfd) != 0) sc_die(SC_EXIT_FAIL, "child: close(listener): %s", strerror(errno));
      if (o.exec) exec_child(&o, fd);
      /* exit(), not _exit(): a preloaded shim's exit handlers (its
       * statistics) must run in the child as in any program. */
      exit(serve(fd, o.mode, false));
    }
    pids[forked++] = pid;
    if (close(fd) != 0) sc_die(SC_EXIT_FAIL, "close(accepted fd): %s", strerror(errno));
  }
  if (close(lfd) != 0) sc_die(SC_EXIT_FAIL, "close(listener): %s", strerror(errno));

  unsigned ok = 0;
  for (unsigned i = 0; i < forked; i++) {
    int status;
    pid_t r;
    do r = waitpid(pids[i], &status, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0) sc_die(SC_EXIT_FAIL, "waitpid(%ld): %s", (long)pids[i], strerror(errno));
    ok += child_ok(pids[i], status);
  }
  int leaked = sc_count_tcp_fds();
  if (leaked != 0) fprintf(stderr, "fork_server: %d TCP sockets still open at exit\n", leaked);
  bool pass = ok == o.conns && leaked == 0;
  printf("fork_server: %s conns=%u children_ok=%u/%u mode=%s exec=%s\n", pass ? "OK" : "FAIL", forked, ok,
         o.conns, sc_mode_name(o.mode), o.exec ? "yes" : "no");
  return pass ? SC_EXIT_OK : SC_EXIT_FAIL;
}

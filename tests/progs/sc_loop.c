#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_drive.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sc_io.h"
#include "sc_util.h"

#define LISTENER UINT32_MAX

/* Per-connection readiness as last reported and not yet used up. With
 * edge-triggered epoll a report comes once per change, so "readable" stays
 * set until a read says EAGAIN; with poll() it is refreshed each round. */
struct conn {
  sc_session_t *s;
  bool connecting, readable, writable, finished, failed;
};

enum { OP_AGAIN, OP_PROGRESS, OP_IDLE, OP_ERROR };

struct loop_state {
  struct sc_loop *cfg;
  struct conn *conns;
  unsigned nconns, accepted, open;
  int epfd;
};

static int set_nonblock(int fd)
{
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return -errno;
  return 0;
}

static int conn_read(struct conn *c)
{
  sc_session_t *s = c->s;
  size_t ask = sc_io_read_size(s);
  ssize_t r = sc_io_read(s, ask, false);

  if (r == SC_IO_BROKEN) return OP_ERROR;
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return OP_AGAIN;
    if (errno == EINTR) return OP_PROGRESS;
    sc_rx_fail(s, "read of %zu bytes failed: %s", ask, strerror(errno));
    return OP_ERROR;
  }
  if (r == 0 ? sc_rx_eof(s) != 0 : sc_rx_feed(s, s->rxbuf, (size_t)r) != 0) return OP_ERROR;
  return OP_PROGRESS;
}

static int conn_write(struct conn *c)
{
  sc_session_t *s = c->s;
  const uint8_t *data;
  size_t n = sc_tx_peek(s, sc_rand_size(&s->tx_rng), &data);

  if (n == 0) return OP_IDLE;
  ssize_t w = sc_io_write(s, data, n);
  if (w < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return OP_AGAIN;
    if (errno == EINTR) return OP_PROGRESS;
    sc_tx_fail(s, "write of %zu bytes failed: %s", n, strerror(errno));
    return OP_ERROR;
  }
  if (w == 0) {
    sc_tx_fail(s, "write of %zu bytes returned 0", n);
    return OP_ERROR;
  }
  sc_tx_commit(s, (size_t)w);
  return OP_PROGRESS;
}

static void conn_close(struct loop_state *L, struct conn *c, bool failed)
{
  sc_session_t *s = c->s;

  if (L->epfd >= 0 && epoll_ctl(L->epfd, EPOLL_CTL_DEL, s->fd, NULL) != 0 && !failed) {
    sc_tx_fail(s, "epoll_ctl(DEL): %s", strerror(errno));
    failed = true;
  }
  if (close(s->fd) != 0 && !failed) {
    sc_tx_fail(s, "close: %s", strerror(errno));
    failed = true;
  }
  s->fd = -1;
  c->finished = true;
  c->failed = failed;
  L->open--;
}

/* Uses the readiness recorded in c. With drain (edge-triggered) it keeps
 * going until neither direction makes progress, because no new report will
 * come for readiness that is already there; that matters for the server,
 * whose sending becomes possible when receiving completes. */
static void conn_step(struct loop_state *L, struct conn *c, bool drain)
{
  sc_session_t *s = c->s;

  if (c->connecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (!c->writable) return;
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      sc_tx_fail(s, "connect: %s", strerror(err));
      conn_close(L, c, true);
      return;
    }
    c->connecting = false;
  }
  for (;;) {
    bool progress = false;
    int r;

    if (c->readable && !sc_rx_done(s)) {
      r = conn_read(c);
      if (r == OP_ERROR) goto failed;
      if (r == OP_AGAIN) c->readable = false;
      progress |= r == OP_PROGRESS;
    }
    if (c->writable) {
      r = conn_write(c);
      if (r == OP_ERROR) goto failed;
      if (r == OP_AGAIN) c->writable = false;
      progress |= r == OP_PROGRESS;
    }
    if (sc_tx_wants_shutdown(s)) {
      if (shutdown(s->fd, SHUT_WR) != 0) {
        sc_tx_fail(s, "shutdown(SHUT_WR): %s", strerror(errno));
        goto failed;
      }
      s->tx_shut = true;
    }
    if (sc_tx_done(s) && sc_rx_done(s)) {
      conn_close(L, c, false);
      return;
    }
    if (!drain || !progress) return;
  }
failed:
  /* Closing makes the peer fail quickly rather than wait for us. */
  conn_close(L, c, true);
}

static int add_conn(struct loop_state *L, sc_session_t *s, bool connecting)
{
  struct conn *c = &L->conns[L->nconns];

  memset(c, 0, sizeof(*c));
  c->s = s;
  c->connecting = connecting;
  int rc = set_nonblock(s->fd);
  if (rc < 0) return sc_tx_fail(s, "fcntl(O_NONBLOCK): %s", strerror(-rc));
  if (L->epfd >= 0) {
    /* Both directions, edge-triggered, from the start. Readiness that
     * already exists is reported once by EPOLL_CTL_ADD itself, so the
     * flags start clear: a shim that loses that report hangs (and the
     * watchdog fails) the test instead of being papered over. */
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
        .data.u32 = L->nconns,
    };
    if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0)
      return sc_tx_fail(s, "epoll_ctl(ADD): %s", strerror(errno));
  }
  L->nconns++;
  L->open++;
  return 0;
}

/* Accepts one connection; 1 when one was added, 0 on EAGAIN, -1 on error. */
static int accept_one(struct loop_state *L)
{
  struct sc_loop *cfg = L->cfg;
  int fd = accept4(cfg->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return 0;
    fprintf(stderr, "%s: accept4: %s\n", program_invocation_short_name, strerror(errno));
    return -1;
  }
  sc_session_t *s = sc_session_new(SC_SERVER, fd, L->accepted, NULL);
  if (!s) {
    fprintf(stderr, "%s: out of memory\n", program_invocation_short_name);
    close(fd);
    return -1;
  }
  s->peer = sc_peer_kind(fd);
  cfg->sessions[cfg->nsessions++] = s;
  L->accepted++;
  if (add_conn(L, s, false) != 0) {
    fprintf(stderr, "%s: conn %u: %s\n", program_invocation_short_name, s->id, sc_session_error(s));
    close(fd);
    s->fd = -1;
    return -1;
  }
  return 1;
}

static int run_epoll(struct loop_state *L)
{
  struct sc_loop *cfg = L->cfg;
  struct epoll_event events[64];

  if (cfg->listen_fd >= 0 && L->accepted < cfg->accept_count) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = LISTENER};
    if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, cfg->listen_fd, &ev) != 0) {
      fprintf(stderr, "%s: epoll_ctl(ADD listener): %s\n", program_invocation_short_name, strerror(errno));
      return -1;
    }
  }
  while (L->open > 0 || (cfg->listen_fd >= 0 && L->accepted < cfg->accept_count)) {
    int n = epoll_wait(L->epfd, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "%s: epoll_wait: %s\n", program_invocation_short_name, strerror(errno));
      return -1;
    }
    for (int i = 0; i < n; i++) {
      uint32_t ev = events[i].events, idx = events[i].data.u32;
      if (idx == LISTENER) {
        /* Edge-triggered: accept until EAGAIN. */
        int r = 0;
        while (L->accepted < cfg->accept_count && (r = accept_one(L)) > 0)
          ;
        if (L->accepted < cfg->accept_count && r < 0) return -1;
        continue;
      }
      struct conn *c = &L->conns[idx];
      if (c->finished) continue;
      if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c->readable = true;
      if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) c->writable = true;
      conn_step(L, c, true);
    }
  }
  return 0;
}

static int run_poll(struct loop_state *L)
{
  struct sc_loop *cfg = L->cfg;
  unsigned cap = cfg->nsessions + cfg->accept_count + 1;
  struct pollfd *pfds = calloc(cap, sizeof(*pfds));
  unsigned *owner = calloc(cap, sizeof(*owner));
  int rc = -1;

  if (!pfds || !owner) {
    fprintf(stderr, "%s: out of memory\n", program_invocation_short_name);
    goto out_free;
  }
  while (L->open > 0 || (cfg->listen_fd >= 0 && L->accepted < cfg->accept_count)) {
    nfds_t n = 0;
    if (cfg->listen_fd >= 0 && L->accepted < cfg->accept_count) {
      pfds[n] = (struct pollfd){.fd = cfg->listen_fd, .events = POLLIN};
      owner[n++] = LISTENER;
    }
    for (unsigned i = 0; i < L->nconns; i++) {
      struct conn *c = &L->conns[i];
      short want = 0;
      if (c->finished) continue;
      if (c->connecting) {
        want = POLLOUT;
      } else {
        if (!sc_rx_done(c->s)) want |= POLLIN;
        if (sc_tx_pending(c->s)) want |= POLLOUT;
      }
      if (want == 0) {
        /* Unreachable unless the session logic is wrong; a loop
         * with nothing to wait for would hang until the watchdog. */
        sc_tx_fail(c->s, "session stalled: nothing to send or receive");
        conn_close(L, c, true);
        continue;
      }
      pfds[n] = (struct pollfd){.fd = c->s->fd, .events = want};
      owner[n++] = i;
    }
    if (n == 0) continue;
    int r = poll(pfds, n, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "%s: poll: %s\n", program_invocation_short_name, strerror(errno));
      goto out_free;
    }
    for (nfds_t i = 0; i < n; i++) {
      short ev = pfds[i].revents;
      if (ev == 0) continue;
      if (ev & POLLNVAL) {
        fprintf(stderr, "%s: poll reported POLLNVAL for fd %d\n", program_invocation_short_name, pfds[i].fd);
        goto out_free;
      }
      if (owner[i] == LISTENER) {
        if (accept_one(L) < 0) goto out_free;
        continue;
      }
      /* Level-triggered: one read and one write per report; poll()
       * reports again whatever is still ready. */
      struct conn *c = &L->conns[owner[i]];
      c->readable = ev & (POLLIN | POLLHUP | POLLERR);
      c->writable = ev & (POLLOUT | POLLHUP | POLLERR);
      conn_step(L, c, false);
      c->readable = c->writable = false;
    }
  }
  rc = 0;
out_free:
  free(pfds);
  free(owner);
  return rc;
}

int sc_loop_run(struct sc_loop *cfg)
{
  struct loop_state L = {.cfg = cfg, .epfd = -1};
  int rc = -1;

  L.conns = calloc(cfg->nsessions + cfg->accept_count + 1, sizeof(*L.conns));
  if (!L.conns) {
    fprintf(stderr, "%s: out of memory\n", program_invocation_short_name);
    return -1;
  }
  if (cfg->mode == SC_MODE_EPOLL_ET) {
    L.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (L.epfd < 0) {
      fprintf(stderr, "%s: epoll_create1: %s\n", program_invocation_short_name, strerror(errno));
      goto out_free;
    }
  }
  if (cfg->listen_fd >= 0) {
    int err = set_nonblock(cfg->listen_fd);
    if (err < 0) {
      fprintf(stderr, "%s: fcntl(listener): %s\n", program_invocation_short_name, strerror(-err));
      goto out_close;
    }
  }
  unsigned initial = cfg->nsessions;
  for (unsigned i = 0; i < initial; i++) {
    if (add_conn(&L, cfg->sessions[i], cfg->connecting && cfg->connecting[i]) != 0) {
      fprintf(stderr, "%s: conn %u: %s\n", program_invocation_short_name, cfg->sessions[i]->id,
              sc_session_error(cfg->sessions[i]));
      goto out_close;
    }
  }
  rc = cfg->mode == SC_MODE_EPOLL_ET ? run_epoll(&L) : run_poll(&L);
  for (unsigned i = 0; i < L.nconns; i++)
    if (L.conns[i].failed) rc = -1;
out_close:
  /* After an early error some sessions may still hold their sockets. */
  for (unsigned i = 0; i < cfg->nsessions; i++)
    if (cfg->sessions[i]->fd >= 0) {
      close(cfg->sessions[i]->fd);
      cfg->sessions[i]->fd = -1;
    }
  if (L.epfd >= 0 && close(L.epfd) != 0) {
    fprintf(stderr, "%s: close(epoll): %s\n", program_invocation_short_name, strerror(errno));
    rc = -1;
  }
out_free:
  free(L.conns);
  return rc;
}

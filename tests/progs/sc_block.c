#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_drive.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sc_io.h"
#include "sc_util.h"

int sc_mode_parse(const char *name, enum sc_mode *out)
{
  if (strcmp(name, "block") == 0)
    *out = SC_MODE_BLOCK;
  else if (strcmp(name, "nonblock-epoll-et") == 0 || strcmp(name, "epoll-et") == 0)
    *out = SC_MODE_EPOLL_ET;
  else if (strcmp(name, "poll") == 0)
    *out = SC_MODE_POLL;
  else
    return -1;
  return 0;
}

const char *sc_mode_name(enum sc_mode mode)
{
  switch (mode) {
  case SC_MODE_BLOCK:
    return "block";
  case SC_MODE_EPOLL_ET:
    return "nonblock-epoll-et";
  default:
    return "poll";
  }
}

static double mono_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* With a rate, waits until the next n bytes keep the direction's bytes
 * written within tx_rate a second since its first write. The budget runs
 * from that first write, so a sender held up (a link that was down) then
 * catches up at full speed, and the stream's length still fixes its
 * duration. */
static void pace(sc_session_t *s, size_t n)
{
  if (s->tx_rate == 0) return;
  double now = mono_now();
  if (s->tx_start == 0) s->tx_start = now;
  double wait = s->tx_start + (double)(s->tx_data_bytes + n) / (double)s->tx_rate - now;
  if (wait <= 0) return;
  struct timespec d = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
  while (nanosleep(&d, &d) != 0 && errno == EINTR) {
  }
}

/* Sends everything that may be sent now; returns when the stream is done or
 * waits for the receive side (the server's trailer). */
static int tx_run(sc_session_t *s)
{
  const uint8_t *data;
  size_t n;

  while ((n = sc_tx_peek(s, sc_rand_size(&s->tx_rng), &data)) > 0) {
    pace(s, n);
    ssize_t w = sc_io_write(s, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return sc_tx_fail(s, "write of %zu bytes failed: %s", n, strerror(errno));
    }
    if (w == 0) return sc_tx_fail(s, "write of %zu bytes returned 0", n);
    sc_tx_commit(s, (size_t)w);
  }
  if (sc_tx_wants_shutdown(s)) {
    if (shutdown(s->fd, SHUT_WR) != 0) return sc_tx_fail(s, "shutdown(SHUT_WR): %s", strerror(errno));
    s->tx_shut = true;
  }
  return 0;
}

/* Receives until the stream is done or, with until_header, until a server
 * knows the header (it needs the lengths before its sender may start). */
static int rx_run(sc_session_t *s, bool until_header)
{
  while (!sc_rx_done(s) && !(until_header && s->hdr_known)) {
    size_t ask = sc_io_read_size(s);
    ssize_t r = sc_io_read(s, ask, true);
    if (r == SC_IO_BROKEN) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return sc_rx_fail(s, "read of %zu bytes failed: %s", ask, strerror(errno));
    }
    if (r == 0 ? sc_rx_eof(s) != 0 : sc_rx_feed(s, s->rxbuf, (size_t)r) != 0) return -1;
  }
  return 0;
}

static void *tx_thread(void *arg)
{
  sc_session_t *s = arg;

  if (tx_run(s) != 0) {
    /* Unblock the receiving thread, whose peer may now wait for us. */
    shutdown(s->fd, SHUT_RDWR);
    return s;
  }
  return NULL;
}

int sc_block_run(sc_session_t *s)
{
  int rc = 0;

  if (s->role == SC_SERVER) rc = rx_run(s, true);
  if (rc == 0 && (s->p.flags & SC_F_BIDIR)) {
    pthread_t tid;
    void *tx_failed;
    int err = pthread_create(&tid, NULL, tx_thread, s);
    if (err != 0) {
      rc = sc_tx_fail(s, "pthread_create: %s", strerror(err));
    } else {
      rc = rx_run(s, false);
      if (rc != 0) shutdown(s->fd, SHUT_RDWR); /* unblock the sender */
      err = pthread_join(tid, &tx_failed);
      if (err != 0)
        rc = sc_tx_fail(s, "pthread_join: %s", strerror(err));
      else if (tx_failed)
        rc = -1;
      /* The sender stops before the server's trailer while the
       * receive side is still busy; this thread sends the rest. */
      if (rc == 0) rc = tx_run(s);
    }
  } else if (rc == 0) {
    /* One direction after the other: the client sends first, the server
     * answers once it has everything. */
    if (s->role == SC_CLIENT)
      rc = tx_run(s) == 0 && rx_run(s, false) == 0 ? 0 : -1;
    else
      rc = rx_run(s, false) == 0 && tx_run(s) == 0 ? 0 : -1;
  }
  if (rc == 0 && !(sc_tx_done(s) && sc_rx_done(s))) rc = sc_tx_fail(s, "stream stopped before completion");
  if (close(s->fd) != 0 && rc == 0) rc = sc_tx_fail(s, "close: %s", strerror(errno));
  s->fd = -1;
  return rc;
}

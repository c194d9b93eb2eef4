/*
 * sc_drive: moving sessions' bytes over their sockets in one of three styles.
 *   block       blocking sockets; a second thread per connection sends while
 *               the first receives when the stream is bidirectional
 *   epoll-et    non-blocking sockets in one edge-triggered epoll loop
 *               (EPOLLET | EPOLLRDHUP): drain to EAGAIN, remember readiness
 *   poll        non-blocking sockets in one level-triggered poll() loop,
 *               one operation per readiness report
 *
 * Contract: the drivers own each session's fd from the moment they get it and
 * close it when the session ends (and on errors). They return 0 when every
 * session completed, -1 otherwise with the reason in the sessions' error
 * strings (or printed, for errors not tied to one session).
 */
#ifndef SC_DRIVE_H
#define SC_DRIVE_H

#include <stdbool.h>

#include "sc_stream.h"

enum sc_mode { SC_MODE_BLOCK, SC_MODE_EPOLL_ET, SC_MODE_POLL };

int sc_mode_parse(const char *name, enum sc_mode *out);
const char *sc_mode_name(enum sc_mode mode);

/* Runs one session on a connected blocking socket, on the calling thread
 * (plus a sender thread for SC_F_BIDIR), its sender paced by s->tx_rate. */
int sc_block_run(sc_session_t *s);

struct sc_loop {
  enum sc_mode mode; /* SC_MODE_EPOLL_ET or SC_MODE_POLL */
  /* Sessions to run; their fds may still be connecting (see connecting).
   * Sessions accepted from listen_fd are appended, so the array must have
   * room for nsessions + accept_count entries. */
  sc_session_t **sessions;
  bool *connecting; /* NULL, or one flag per initial session */
  unsigned nsessions;
  int listen_fd;         /* -1, or a listening socket ... */
  unsigned accept_count; /* ... to accept this many connections from */
};

/* Runs all sessions to completion in one event loop. */
int sc_loop_run(struct sc_loop *loop);

#endif

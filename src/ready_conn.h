/*
 * ready_conn.h - one carried connection's readiness as poll and epoll
 * report it: the link's answer for what it owns, the kernel's for the
 * rest (poll_select.c, epoll_wait.c).
 *
 * Contract:
 *  - r2s__ready_carried: the connection behind fd with a reference
 *    (r2s__conn_put it), or NULL when fd is not a connection the shim
 *    carries (none, or its link is pass-through).
 *  - r2s__ready_kernel_in: the kernel's readiness krev for `want`, with
 *    POLLIN replaced by the link's answer when the bytes the kernel sees
 *    may be the shim's (before the peer's switch mark has been read).
 *  - r2s__ready_urgent_hidden: whether the pending urgent byte is the
 *    peer shim's (its hello or switch mark): POLLPRI is then not reported,
 *    and the link has read on to it.
 *  - These may read control frames from fd (r2s__link_pump, r2s__link_poll)
 *    and take the link's locks only as those do. Called with an epoll
 *    set's registry lock held (readiness.h's lock order).
 */
#ifndef R2S_READY_CONN_H
#define R2S_READY_CONN_H

#include <stdbool.h>

#include "conn.h"

r2s_conn_t *r2s__ready_carried(int fd);
short r2s__ready_kernel_in(r2s_conn_t *c, int fd, short want, short krev);
bool r2s__ready_urgent_hidden(r2s_conn_t *c, int fd);

#endif

/* A carried connection's readiness: the link's answer merged with the
 * kernel's (ready_conn.h). */
#include "ready_conn.h"

#include <poll.h>

#include "fdtable.h"
#include "link.h"

/* The carried connection behind fd, with a reference, or NULL. */
r2s_conn_t *r2s__ready_carried(int fd)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  if (c && r2s__conn_passthrough(c)) {
    r2s__conn_put(c);
    c = NULL;
  }
  return c;
}

/* The kernel says readable, but before the peer's switch mark has been
 * read the bytes may be that mark's HANDSHAKE and frames, which are not
 * the application's: an application that reads only after being told
 * "readable" (wrk counts EAGAIN then as a read error) must not be told.
 * The link reads them first; once it carries the receive direction, its
 * answer replaces the kernel's POLLIN. Returns the events to report. */
short r2s__ready_kernel_in(r2s_conn_t *c, int fd, short want, short krev)
{
  int rx = r2s__link_rx_state(c->link);
  if (!(krev & want & POLLIN) || (rx != R2S_RX_PROBE && rx != R2S_RX_PREMARK)) return krev;
  r2s__link_pump(c->link, fd);
  short owned, rev = r2s__link_poll(c->link, fd, POLLIN, &owned);
  if (!(owned & POLLIN)) return krev; /* still in front of the mark: the application's bytes */
  return (short)((krev & ~POLLIN) | (rev & POLLIN));
}

/* POLLPRI is the application's only for its peer's urgent bytes. The peer
 * shim's own (its hello, its switch mark) would wake an application that
 * waits on POLLPRI for urgent data to come (oob_peer.py --sync): it then
 * finds no mark, reads on, and the real urgent byte, arriving later at the
 * position it reads from, is skipped. So while the receive direction is
 * not back on plain TCP, a pending urgent byte that is the shim's is read
 * by the link where it is next (the switch mark and its frames) and not
 * reported. The peer's application byte, sent only once this end passed
 * the switch mark (docs/protocol.md, "Urgent data"), replaces it. */
bool r2s__ready_urgent_hidden(r2s_conn_t *c, int fd)
{
  r2s_link_t *l = c->link;
  if (!r2s__link_urgent_is_shims(l, fd)) return false;
  r2s__link_pump(l, fd);
  return true;
}

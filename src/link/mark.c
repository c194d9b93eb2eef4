/* The urgent-mark channel: where the peer's urgent bytes stand, and
 * whether one is the shim's (a hello or a switch mark, docs/protocol.md)
 * or the application's. */
#include "internal.h"

#include "libc.h"

#include "tcphist.h"

static int at_mark(int fd)
{
  int v = 0;
  return r2s__libc.ioctl(fd, SIOCATMARK, &v) < 0 ? -errno : v;
}

/* The urgent byte the peer sent last, without consuming it (so an
 * application that uses urgent data itself still finds it): its value,
 * -EAGAIN if the pointer arrived but not the byte, -EINVAL if none. */
int lk_urgent_peek(int fd)
{
  unsigned char c;
  ssize_t n = r2s__libc.recv(fd, &c, 1, MSG_OOB | MSG_PEEK | MSG_DONTWAIT);
  return n == 1 ? c : -errno;
}

/* The urgent byte at the reader's position once the connection was reset:
 * the kernel no longer answers recv(MSG_OOB) then (ENOTCONN), but the byte
 * is still in the stream, where SO_OOBINLINE shows it. Only for a reader at
 * the mark (SIOCATMARK 1), with rx_lock held and the kernel's SO_OOBINLINE
 * the shim's (off) in PROBE and PREMARK. Its value, or -errno. */
int lk_urgent_after_reset(int fd)
{
  int on = 1, off = 0;
  unsigned char c;
  if (r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on) < 0) return -errno;
  ssize_t n = r2s__libc.recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  int err = n < 0 ? -errno : 0;
  (void)r2s__libc.setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &off, sizeof off);
  return n == 1 ? c : n == 0 ? -ENOTCONN : err;
}

/* Whether the reader is at an urgent mark (1, 0 or -errno) and, when it
 * is, the urgent byte of that mark in *urg. Two calls cannot ask the
 * kernel both at once, and a newer urgent byte replaces the older one
 * between them: a server's switch mark sent behind its greeting replaces
 * its hello at position 0 and moves the mark past the greeting. A value
 * read after SIOCATMARK said 1 may so belong to a mark we are not at, and
 * the greeting would be parsed as frames. So the value is read after a
 * first SIOCATMARK and the position asked again after the value: a mark
 * that arrives later lies farther on, never under the reader, so a second
 * 1 means the value read before it is the one at the reader. */
int lk_mark_here(int fd, int *urg)
{
  int m = at_mark(fd);
  if (m != 1) return m;
  *urg = lk_urgent_peek(fd);
  return at_mark(fd);
}

/* Our hello: a sized one when the policy waits for bytes (at least the
 * largest power of two in after_bytes), so that a peer that closes first
 * knows whether a switch mark of ours could still come (r2s__link_close). */
unsigned char lk_hello_byte(const r2s_link_t *l)
{
  uint64_t after = l->policy.upgrade.mode == R2S_UPGRADE_NOW ? 0 : l->policy.upgrade.after_bytes;
  if (after == 0) return R2S_HELLO_BYTE;
  return (unsigned char)(R2S_HELLO_SIZED | (63 - __builtin_clzll(after)));
}

/* Whether the peer's urgent byte urg (>= 0) is the shim's: a switch mark,
 * or a hello where hellos are sent, at the very start of the stream (the
 * reader then stands at the mark: mark 1, or -1 to ask). An application
 * may send an urgent byte of the same value; anywhere else it is its own.
 * At the start it could be either, if the peer's shim had not greeted
 * first: an accepting end does before its application's first urgent byte
 * (r2s__link_send_oob), so the application's byte comes second and the
 * kernel steps over the hello, which r2s__tcp_mark_at_start sees. */
bool lk_shim_urgent_here(int fd, int urg, int mark)
{
  if (!r2s__is_shim_urgent(urg)) return false;
  /* A switch mark may stand anywhere; an application's urgent byte of
   * its value is taken for one (README, limitations). */
  if (urg == R2S_SWITCH_BYTE) return true;
  /* Where the mark stands is asked of the kernel, not of our count, which
   * a link inherited across exec does not have; and after urg was read
   * (mark 1 says so): a position asked before may be that of no urgent
   * byte at all. */
  int m = mark == 1 ? 1 : at_mark(fd);
  /* The kernel cannot say (a reset, an old kernel): taken for the hello,
   * which is by far the likelier. */
  if (m < 0 || (m == 1 && r2s__tcp_mark_at_start(fd) != 0)) return true;
  /* Past the start or ahead of the reader, unless a newer urgent byte
   * (the peer's switch mark) came since urg was read and moved the mark:
   * the reader then looks again, at the new one. */
  return lk_urgent_peek(fd) != urg || at_mark(fd) != m;
}

/* The peer's urgent byte urg (>= 0) was seen (mark as for
 * lk_shim_urgent_here): a hello is kept for r2s__link_close. Returns whether
 * the byte is the shim's. */
bool lk_note_urgent(r2s_link_t *l, int fd, int urg, int mark)
{
  bool ours = lk_shim_urgent_here(fd, urg, mark);
  if (ours && r2s__is_hello(urg)) __atomic_store_n(&l->peer_hello, urg, __ATOMIC_RELAXED);
  return ours;
}

/* tcphist.c - see tcphist.h. The kernel's own header for struct tcp_info:
 * glibc's copy stops before the byte counts. It cannot share a file with
 * <netinet/tcp.h>, hence this one. */
#include "tcphist.h"

#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "libc.h"

/* tcpi_state's values (the kernel's net/tcp_states.h; <netinet/tcp.h>
 * repeats them, but cannot be included here). */
enum {
  K_TCP_ESTABLISHED = 1,
  K_TCP_TIME_WAIT = 6,
  K_TCP_CLOSE = 7,
  K_TCP_CLOSE_WAIT = 8,
  K_TCP_LAST_ACK = 9,
  K_TCP_CLOSING = 11
};

bool r2s__tcp_never_sent(int fd)
{
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) return false;
  /* An older kernel (before 4.19) fills a shorter struct: no answer. */
  if (len < offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof ti.tcpi_bytes_sent) return false;
  /* A FIN of ours (a shutdown or close by any holder) moves the socket out
   * of these two states; tcpi_bytes_sent does not count it. */
  if (ti.tcpi_state != K_TCP_ESTABLISHED && ti.tcpi_state != K_TCP_CLOSE_WAIT) return false;
  /* tcpi_bytes_sent counts every data byte that left (retransmissions
   * too), SIOCOUTQ what was written and is not yet acknowledged, which
   * covers what has not left yet. */
  int queued = -1;
  if (r2s__libc.ioctl(fd, SIOCOUTQ, &queued) < 0) return false;
  return ti.tcpi_bytes_sent == 0 && queued == 0;
}

/* Bytes the kernel holds behind the mark the reader stands at: a peek
 * with MSG_TRUNC counts them without copying, past the urgent byte. */
static ssize_t behind_mark(int fd)
{
  ssize_t n = r2s__libc.recv(fd, NULL, 1u << 30, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
  return n < 0 && errno == EAGAIN ? 0 : n < 0 ? -errno : n;
}

int r2s__tcp_mark_at_start(int fd)
{
  /* tcpi_bytes_received counts every byte that came (the urgent ones, and
   * 1 for the FIN); what the reader has not passed is the urgent byte it
   * stands at and what lies behind it. Two equal counts around the
   * TCP_INFO say that no byte came in between. */
  for (int tries = 0; tries < 3; tries++) {
    ssize_t a = behind_mark(fd);
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (a < 0) return (int)a;
    if (r2s__libc.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) return -errno;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return -ENOTSUP;
    if (behind_mark(fd) != a) continue;
    if (ti.tcpi_state == K_TCP_CLOSE) return -ENOTCONN; /* a reset: the FIN's share is unknown */
    uint64_t fin = ti.tcpi_state == K_TCP_CLOSE_WAIT || ti.tcpi_state == K_TCP_LAST_ACK ||
                   ti.tcpi_state == K_TCP_CLOSING || ti.tcpi_state == K_TCP_TIME_WAIT;
    uint64_t ahead = (uint64_t)a + 1 + fin;
    if (ti.tcpi_bytes_received < ahead) return -EPROTO;
    return ti.tcpi_bytes_received == ahead;
  }
  return -EAGAIN;
}

/* tcphist.c - see tcphist.h. The kernel's own header for struct tcp_info:
 * glibc's copy stops before the byte counts. It cannot share a file with
 * <netinet/tcp.h>, hence this one. */
#include "tcphist.h"

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
enum { K_TCP_ESTABLISHED = 1, K_TCP_CLOSE_WAIT = 8 };

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

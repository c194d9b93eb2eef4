/* Socket options on a tracked connection (sockopt.h). */
#include "sockopt.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/time.h>

#include "libc.h"
#include "link.h"

static uint32_t timeval_ms(const void *val, socklen_t len)
{
  if (len < sizeof(struct timeval)) return 0;
  const struct timeval *tv = val;
  uint64_t ms = (uint64_t)tv->tv_sec * 1000 + (uint64_t)(tv->tv_usec + 999) / 1000;
  return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

int r2s__sockopt_set(r2s_conn_t *c, int fd, int level, int name, const void *val, socklen_t len)
{
  bool one_int = val && len >= sizeof(int);
  /* SO_OOBINLINE before the connection exists (on a listener, or before
   * connect): kept out of the kernel until the peer's hello can no longer
   * arrive, or the hello would be read as data (link/oob.c applies it then). */
  if (level == SOL_SOCKET && name == SO_OOBINLINE && one_int && !(r2s__conn_flags(c) & R2S_CONN_ESTABLISHED)) {
    r2s__conn_set_flag(c, R2S_CONN_OOBINLINE | R2S_CONN_APP_OOB, *(const int *)val != 0);
    return 0;
  }
  /* Once the shim's frames travel on the socket, TCP_NODELAY and TCP_CORK
   * are the shim's: the link keeps the application's aside. SO_OOBINLINE
   * on a connected socket: the link keeps it from the kernel while the
   * peer's hello or switch mark may still be read. */
  r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  bool tcp_opt = level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK);
  bool oobinline = level == SOL_SOCKET && name == SO_OOBINLINE;
  if (l && (tcp_opt || oobinline) && one_int) {
    int v = *(const int *)val, rc = r2s__link_setsockopt(l, fd, level, name, v);
    if (rc == 0 && oobinline && v) r2s__conn_app_oob(c, fd);
    if (rc < 0) errno = -rc;
    return rc < 0 ? -1 : 0;
  }
  int rc = r2s__libc.setsockopt(fd, level, name, val, len);
  if (rc == 0 && level == IPPROTO_TCP && name == TCP_FASTOPEN_CONNECT && one_int)
    r2s__conn_set_flag(c, R2S_CONN_FASTOPEN, *(const int *)val != 0);
  if (rc != 0 || level != SOL_SOCKET) return rc;
  int saved = errno;
  /* What the shim must honour itself once it carries the bytes. */
  if (name == SO_RCVTIMEO) {
    c->rcvtimeo_ms = timeval_ms(val, len);
  } else if (name == SO_SNDTIMEO) {
    c->sndtimeo_ms = timeval_ms(val, len);
  } else if (name == SO_OOBINLINE && one_int && *(const int *)val) {
    r2s__conn_app_oob(c, fd);
  } else if (name == SO_ZEROCOPY && one_int && *(const int *)val) {
    r2s__conn_set_flag(c, R2S_CONN_ZEROCOPY, true);
    if ((l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE))) r2s__link_kernel_tx(l, fd);
  } else if (name == SO_SNDBUF || name == SO_SNDBUFFORCE || name == SO_RCVBUF || name == SO_RCVBUFFORCE) {
    bool snd = name == SO_SNDBUF || name == SO_SNDBUFFORCE;
    if (snd) r2s__conn_set_flag(c, R2S_CONN_SNDBUF, true);
    if ((l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE))) r2s__link_sized_buffers(l, fd, snd);
  }
  errno = saved;
  return rc;
}

int r2s__sockopt_get(r2s_conn_t *c, int fd, int level, int name, void *val, socklen_t *len)
{
  int rc = r2s__libc.getsockopt(fd, level, name, val, len);
  if (rc != 0) return rc;
  int saved = errno;
  r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  if (l && level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK) && *len >= sizeof(int)) {
    int v = r2s__link_getsockopt(l, level, name);
    if (v >= 0) *(int *)val = v;
  }
  /* While the shim keeps the kernel's SO_OOBINLINE off, the application
   * still sees the value it set. */
  if (level == SOL_SOCKET && name == SO_OOBINLINE && *len >= sizeof(int) &&
      ((l && r2s__link_getsockopt(l, SOL_SOCKET, SO_OOBINLINE) == 1) ||
       (!(r2s__conn_flags(c) & R2S_CONN_ESTABLISHED) && (r2s__conn_flags(c) & R2S_CONN_OOBINLINE))))
    *(int *)val = 1;
  /* SO_ERROR == 0 after a nonblocking connect means "connected" only if the
   * peer is known: while the handshake runs it is 0 as well. */
  if (level == SOL_SOCKET && name == SO_ERROR && *len >= sizeof(int) && *(int *)val == 0 &&
      (r2s__conn_flags(c) & R2S_CONN_CONNECTING)) {
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    if (r2s__libc.getpeername(fd, (struct sockaddr *)&peer, &plen) == 0) r2s__conn_established(c, fd);
  }
  errno = saved;
  return rc;
}

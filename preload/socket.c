/* Wrappers of the socket life cycle: socket, connect, accept, listen and the
 * option and name calls. They track TCP sockets; the kernel does the work. */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include "link.h"
#include "sockopt.h"
#include "stats.h"
#include "wrap.h"

/* Starts tracking fd; the table's slot keeps the only reference. */
static r2s_conn_t *track(int fd, int domain, r2s_role_t role, int nonblock)
{
  r2s_conn_t *c = r2s__conn_new(domain, role, fd);
  if (!c) return NULL;
  if (nonblock) r2s__conn_set_flag(c, R2S_CONN_NONBLOCK, 1);
  if (r2s__fd_install(fd, c) < 0) {
    r2s__conn_put(c);
    return NULL;
  }
  return c; /* still holding the creator's reference: the caller puts it */
}

R2S_EXPORT int socket(int domain, int type, int protocol)
{
  r2s__ensure_init();
  int fd = r2s__libc.socket(domain, type, protocol);
  if (fd < 0 || r2s__in_shim || !r2s__is_tcp(domain, type, protocol)) return fd;
  int saved = errno;
  r2s_conn_t *c = track(fd, domain, R2S_ROLE_SOCKET, type & SOCK_NONBLOCK);
  if (c) r2s__conn_put(c);
  errno = saved;
  return fd;
}

R2S_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
  r2s_conn_t *c = wrap_lookup(fd);
  int rc = r2s__libc.connect(fd, addr.__sockaddr__, len);
  int err = errno;
  if (rc == 0 || err == EINPROGRESS) {
    int domain;
    if (!c && !r2s__in_shim && (domain = r2s__fd_tcp_domain(fd)) >= 0) {
      c = track(fd, domain, R2S_ROLE_CLIENT, (r2s__libc.fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
      if (c) R2S_STAT_INC(sockets_adopted);
    }
    if (c) {
      r2s__conn_set_role(c, R2S_ROLE_CLIENT);
      r2s__conn_note_peer(c, addr.__sockaddr__, len);
      if (rc == 0)
        r2s__conn_established(c, fd);
      else
        r2s__conn_connecting(c);
    }
  }
  if (c) r2s__conn_put(c);
  errno = err;
  return rc;
}

/* peer, plen: the peer's address as accept() returned it (plen 0: none). */
static void accepted(r2s_conn_t *listener, int fd, int flags, const struct sockaddr *peer, socklen_t plen)
{
  int saved = errno;
  int domain = listener ? listener->domain : -1;
  if (listener || (!r2s__in_shim && (domain = r2s__fd_tcp_domain(fd)) >= 0)) {
    r2s_conn_t *c = track(fd, domain, R2S_ROLE_SERVER, flags & SOCK_NONBLOCK);
    if (c) {
      /* Accepted sockets inherit the listener's SO_OOBINLINE and
       * SO_SNDBUF, as the kernel's do. */
      if (listener) {
        r2s__conn_set_flag(c, r2s__conn_flags(listener) & (R2S_CONN_APP_OOB | R2S_CONN_OOBINLINE | R2S_CONN_SNDBUF),
                           true);
        r2s__conn_note_accepted(c, listener);
      }
      if (plen) r2s__conn_note_peer(c, peer, plen);
      r2s__conn_established(c, fd);
      r2s__conn_put(c);
    }
  }
  errno = saved;
}

/* The peer's address comes with accept() at no cost: into the
 * application's buffer, or, where it passed none, into ours (the kernel
 * writes nothing the application can see there). Set up by accept_addr,
 * read back by accept_peer: the application's, only if it held the whole
 * address. */
typedef struct {
  struct sockaddr_storage own;
  socklen_t own_len, cap;
  struct sockaddr *addr;
  socklen_t *len;
} accept_addr_t;

static void accept_addr(accept_addr_t *a, struct sockaddr *addr, socklen_t *len)
{
  a->own_len = sizeof a->own;
  a->cap = addr && len ? *len : 0;
  a->addr = addr ? addr : (struct sockaddr *)&a->own;
  a->len = addr ? len : &a->own_len;
}

static socklen_t accept_peer(const accept_addr_t *a)
{
  if (a->addr == (const struct sockaddr *)&a->own) return a->own_len;
  return a->len && *a->len <= a->cap ? *a->len : 0;
}

R2S_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
  r2s_conn_t *l = wrap_lookup(fd);
  accept_addr_t a;
  accept_addr(&a, addr.__sockaddr__, len);
  int nfd = r2s__libc.accept(fd, a.addr, a.len);
  if (nfd >= 0) accepted(l, nfd, 0, a.addr, accept_peer(&a));
  if (l) wrap_put(l);
  return nfd;
}

R2S_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
  r2s_conn_t *l = wrap_lookup(fd);
  accept_addr_t a;
  accept_addr(&a, addr.__sockaddr__, len);
  int nfd = r2s__libc.accept4(fd, a.addr, a.len, flags);
  if (nfd >= 0) accepted(l, nfd, flags, a.addr, accept_peer(&a));
  if (l) wrap_put(l);
  return nfd;
}

R2S_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
  r2s__ensure_init();
  return r2s__libc.bind(fd, addr.__sockaddr__, len);
}

R2S_EXPORT int listen(int fd, int backlog)
{
  r2s_conn_t *c = wrap_lookup(fd);
  int rc = r2s__libc.listen(fd, backlog);
  if (c) {
    if (rc == 0 && c->role != R2S_ROLE_LISTENER) {
      r2s__conn_set_role(c, R2S_ROLE_LISTENER);
      R2S_STAT_INC(listeners);
    }
    wrap_put(c);
  }
  return rc;
}

void wrap_slow_checks(r2s_conn_t *c, int fd, int flags)
{
  int saved = errno;
  /* The process that moves bytes on a connection shared by fork() is the
   * one that owns its end (close drains and finishes it there). */
  if (r2s__conn_flags(c) & R2S_CONN_FORKED) r2s__conn_set_flag(c, R2S_CONN_FORKED, false);
  if (r2s__conn_flags(c) & R2S_CONN_UNSEEN) r2s__conn_take(c);
  if (r2s__conn_flags(c) & R2S_CONN_CONNECTING) {
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    if (r2s__libc.getpeername(fd, (struct sockaddr *)&peer, &plen) == 0) {
      r2s__conn_note_peer(c, (struct sockaddr *)&peer, plen);
      r2s__conn_established(c, fd);
    }
  }
  if (flags & MSG_OOB) r2s__conn_app_oob(c, fd);
  errno = saved;
}

R2S_EXPORT int shutdown(int fd, int how)
{
  r2s_conn_t *c = wrap_lookup(fd);
  if (!c) return r2s__libc.shutdown(fd, how);
  if (r2s__conn_passthrough(c)) {
    wrap_put(c);
    return r2s__libc.shutdown(fd, how);
  }
  int rc = r2s__link_shutdown(c->link, fd, how);
  r2s__conn_put(c);
  if (rc < 0) {
    errno = -rc;
    return -1;
  }
  return 0;
}

R2S_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
  r2s_conn_t *c = wrap_lookup(fd);
  if (!c) return r2s__libc.setsockopt(fd, level, name, val, len);
  int rc = r2s__sockopt_set(c, fd, level, name, val, len);
  wrap_put(c);
  return rc;
}

R2S_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
  r2s_conn_t *c = wrap_lookup(fd);
  if (!c) return r2s__libc.getsockopt(fd, level, name, val, len);
  int rc = r2s__sockopt_get(c, fd, level, name, val, len);
  wrap_put(c);
  return rc;
}

R2S_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
  r2s__ensure_init();
  return r2s__libc.getsockname(fd, addr.__sockaddr__, len);
}

R2S_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
  r2s__ensure_init();
  return r2s__libc.getpeername(fd, addr.__sockaddr__, len);
}

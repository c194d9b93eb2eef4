#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* getaddrinfo reports its own error space; numeric hosts only fail on a bad
 * literal or a family the host lacks, so map those onto errno values. */
static int resolve(const char *host, int port, bool passive, struct addrinfo **out)
{
  struct addrinfo hints;
  char service[16];

  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  snprintf(service, sizeof(service), "%d", port);
  int rc = getaddrinfo(host, service, &hints, out);
  if (rc == 0) return 0;
  if (rc == EAI_SYSTEM) return -errno;
  return rc == EAI_FAMILY || rc == EAI_ADDRFAMILY ? -EAFNOSUPPORT : -EINVAL;
}

static int bound_port_of(int fd, int *port)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);

  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -errno;
  if (ss.ss_family == AF_INET)
    *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  else if (ss.ss_family == AF_INET6)
    *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  else
    return -EAFNOSUPPORT;
  return 0;
}

int sc_listen(const char *host, int port, bool v6_dual, int *bound_port)
{
  struct addrinfo *ai;
  int one = 1, zero = 0, rc;

  if (!host) host = v6_dual ? "::" : "127.0.0.1";
  rc = resolve(host, port, true, &ai);
  if (rc < 0) return rc;
  if (v6_dual && ai->ai_family != AF_INET6) {
    rc = -EINVAL;
    goto err_free_ai;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    rc = -errno;
    goto err_free_ai;
  }
  /* SO_REUSEADDR: a previous test's TIME_WAIT must not block this port.
   * SOMAXCONN: a client may open 1024 connections before the first accept. */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      (v6_dual && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0) ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    rc = -errno;
    goto err_close;
  }
  rc = bound_port_of(fd, bound_port);
  if (rc < 0) goto err_close;
  freeaddrinfo(ai);
  return fd;

err_close:
  close(fd);
err_free_ai:
  freeaddrinfo(ai);
  return rc;
}

int sc_connect(const char *host, int port, bool nonblock, bool *in_progress)
{
  struct addrinfo *ai;
  int rc = resolve(host, port, false, &ai);

  if (rc < 0) return rc;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) {
    rc = -errno;
    goto err_free_ai;
  }
  *in_progress = false;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (!nonblock || errno != EINPROGRESS) {
      rc = -errno;
      goto err_close;
    }
    *in_progress = true;
  }
  freeaddrinfo(ai);
  return fd;

err_close:
  close(fd);
err_free_ai:
  freeaddrinfo(ai);
  return rc;
}

enum sc_peer_kind sc_peer_kind(int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);

  if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return SC_PEER_OTHER;
  if (ss.ss_family == AF_INET) return SC_PEER_V4;
  if (ss.ss_family == AF_INET6)
    return IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr) ? SC_PEER_V4MAPPED : SC_PEER_V6;
  return SC_PEER_OTHER;
}

const char *sc_peer_kind_name(enum sc_peer_kind kind)
{
  switch (kind) {
  case SC_PEER_V4:
    return "v4";
  case SC_PEER_V6:
    return "v6";
  case SC_PEER_V4MAPPED:
    return "v4mapped";
  default:
    return "other";
  }
}

int sc_report_port(int fd, int port)
{
  char line[16];
  int n = snprintf(line, sizeof(line), "%d\n", port);

  ssize_t w = write(fd, line, (size_t)n);
  int rc = w == n ? 0 : (w < 0 ? -errno : -EIO);
  if (close(fd) != 0 && rc == 0) rc = -errno;
  return rc;
}

int sc_count_tcp_fds(void)
{
  DIR *dir = opendir("/proc/self/fd");
  struct dirent *de;
  int count = 0;

  if (!dir) return -errno;
  while ((de = readdir(dir)) != NULL) {
    struct stat st;
    int domain, type;
    socklen_t len = sizeof(int);
    char *end;
    long fd = strtol(de->d_name, &end, 10);

    if (*end != '\0' || end == de->d_name || fd == dirfd(dir)) continue;
    /* r2sock finishes closed connections in the background (README,
     * "close"): it keeps a close-on-exec duplicate at fd 512 or above for
     * up to 2 s. These programs never open that many fds themselves. */
    if (fd >= 512 && (fcntl((int)fd, F_GETFD) & FD_CLOEXEC)) continue;
    if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (getsockopt((int)fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) continue;
    len = sizeof(int);
    if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) continue;
    if ((domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM) count++;
  }
  closedir(dir);
  return count;
}

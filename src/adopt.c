/* TCP sockets that reach the process ready-made (adopt.h). */
#include "adopt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conn.h"
#include "fdtable.h"
#include "libc.h"
#include "log.h"
#include "tcphist.h"

/* Tracks fd, a socket, if it is TCP: a listener, or a stream that may
 * still upgrade here if fresh (no duplicate of it was tracked already)
 * and nothing was ever sent on it. Returns whether it did; how says
 * where it came from, for the log. */
static bool adopt_one(int fd, bool fresh, const char *how)
{
  int domain = r2s__fd_tcp_domain(fd);
  if (domain < 0) return false;
  bool listening = r2s__sockopt_int(fd, SO_ACCEPTCONN) == 1;
  struct sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  bool connected = !listening && r2s__libc.getpeername(fd, (struct sockaddr *)&peer, &plen) == 0;
  r2s_conn_t *c = r2s__conn_new(domain, listening ? R2S_ROLE_LISTENER : R2S_ROLE_SERVER, fd);
  if (!c) return false;
  int fl = r2s__libc.fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK)) r2s__conn_set_flag(c, R2S_CONN_NONBLOCK, true);
  /* Urgent bytes read inline (the earlier owner's setting) would have put
   * the peer's hello in the stream already. */
  bool untouched = connected && fresh && r2s__sockopt_int(fd, SO_OOBINLINE) == 0 && r2s__tcp_never_sent(fd);
  r2s__conn_adopted(c, fd, connected, untouched);
  r2s__fd_install(fd, c);
  r2s__conn_put(c);
  r2s__debug("adopted %s TCP socket fd %d (%s)", how, fd,
             listening   ? "listener"
             : untouched ? "stream, nothing sent yet"
                         : "stream");
  return true;
}

/* An inherited socket's first fd number, by inode. */
typedef struct adopted_s {
  dev_t dev;
  ino_t ino;
  int fd;
} adopted_t;

/* fd is a duplicate of a socket already adopted (an inetd-style server
 * hands its worker one socket as fds 0 and 1): it gets the same
 * connection, as dup() would have given it. */
static bool adopt_duplicate(const adopted_t *seen, size_t n, const struct stat *st, int fd)
{
  for (size_t i = 0; i < n; i++) {
    if (seen[i].dev != st->st_dev || seen[i].ino != st->st_ino) continue;
    r2s_conn_t *c = r2s__fd_get(seen[i].fd);
    if (c) {
      r2s__fd_install(fd, c);
      r2s__conn_put(c);
    }
    return true;
  }
  return false;
}

void r2s__adopt_inherited(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int self = dirfd(d);
  adopted_t *seen = NULL;
  size_t n = 0, cap = 0;
  bool full = false;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end != '\0' || e->d_name[0] == '\0' || fd == self || fd < 0) continue;
    struct stat st;
    if (fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode)) continue;
    if (adopt_duplicate(seen, n, &st, (int)fd)) continue;
    if (n == cap && !full) {
      size_t ncap = cap ? 2 * cap : 16;
      adopted_t *more = realloc(seen, ncap * sizeof *more);
      if (more) {
        seen = more;
        cap = ncap;
      } else {
        /* Duplicates found later get states of their own, so from here on
         * only links that never send or switch (R2S_LINK_ADOPTED, link.h). */
        full = true;
      }
    }
    if (!adopt_one((int)fd, !full, "inherited")) continue;
    if (!full) seen[n++] = (adopted_t){st.st_dev, st.st_ino, (int)fd};
  }
  free(seen);
  closedir(d);
}

/* Calls fn on every descriptor that msg's ancillary data passes. */
static void each_passed(const struct msghdr *msg, void (*fn)(int))
{
  if (!msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr)) return;
  for (struct cmsghdr *h = CMSG_FIRSTHDR((struct msghdr *)msg); h; h = CMSG_NXTHDR((struct msghdr *)msg, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS || h->cmsg_len < CMSG_LEN(0)) continue;
    size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char *p = CMSG_DATA(h);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, p + i * sizeof fd, sizeof fd);
      if (fd >= 0) fn(fd);
    }
  }
}

static void take_passed(int fd)
{
  /* The kernel just gave this number out: anything the table holds for
   * it is of a descriptor closed where the shim did not see it. */
  r2s_conn_t *gone = r2s__fd_remove(fd);
  if (gone) r2s__conn_put(gone);
  struct stat st;
  if (r2s__fstat_raw(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) return;
  /* A socket this process tracks under another number too (one it sent
   * to itself) gets a connection of its own here: the table is not
   * searched for its inode on every descriptor passed. */
  (void)adopt_one(fd, true, "passed");
}

void r2s__adopt_passed(const struct msghdr *msg)
{
  int saved = errno; /* after the application's receive call */
  each_passed(msg, take_passed);
  errno = saved;
}

static void give(int fd)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  if (!c) return;
  r2s__conn_set_flag(c, R2S_CONN_FORKED, true);
  r2s__conn_put(c);
}

void r2s__adopt_given(const struct msghdr *msg)
{
  each_passed(msg, give);
}

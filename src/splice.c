/* splice(2) from or into a connection the shim carries (splice.h). */
#include "splice.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "libc.h"
#include "stream.h"

/* The most one call moves: the default capacity of a pipe. */
#define CHUNK (64u << 10)

/* The calling thread's own pipe (read end, write end; -1 until made) and
 * what it holds (at most CHUNK), empty between calls, closed with the
 * thread. Blocking: the kernel takes either end's O_NONBLOCK for
 * SPLICE_F_NONBLOCK in a splice or tee with the other pipe, whose own
 * setting must decide; and what is read from it is always there. */
static __thread int own[2] = {-1, -1};
static __thread size_t own_cap;
static pthread_key_t own_key;
static pthread_once_t own_once = PTHREAD_ONCE_INIT;

static void own_close(void *unused)
{
  (void)unused;
  for (int i = 0; i < 2; i++)
    if (own[i] >= 0) r2s__libc.close(own[i]), own[i] = -1;
}

/* A fork child's pipe would be its parent's: both would move their bytes
 * through one pipe. The child makes its own. */
static void own_fork_child(void)
{
  own_close(NULL);
}

static void own_key_make(void)
{
  (void)pthread_key_create(&own_key, own_close);
  (void)pthread_atfork(NULL, NULL, own_fork_child);
}

/* The thread's pipe, made on first use: close-on-exec, and numbered from
 * 512 up like the shim's other descriptors, away from the low numbers a
 * program may count on. 0 or -errno. */
static int own_pipe(void)
{
  if (own[0] >= 0) return 0;
  pthread_once(&own_once, own_key_make);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -errno;
  for (int i = 0; i < 2; i++) {
    int high = r2s__libc.fcntl(p[i], F_DUPFD_CLOEXEC, 512);
    if (high >= 0) r2s__libc.close(p[i]), p[i] = high;
  }
  /* A user past fs.pipe-user-pages-soft gets pipes of one page. */
  int cap = r2s__libc.fcntl(p[1], F_GETPIPE_SZ);
  own_cap = cap <= 0 ? 4096 : (size_t)cap < CHUNK ? (size_t)cap : CHUNK;
  own[0] = p[0], own[1] = p[1];
  (void)pthread_setspecific(own_key, own); /* non-NULL: the destructor runs */
  return 0;
}

/* Takes n bytes the caller has seen there from fd (a pipe: the caller's,
 * or the thread's own, emptied so) or from connection c (a socket); they
 * are there, so this does not wait. */
static void take(r2s_conn_t *c, int fd, char *buf, size_t n)
{
  while (n > 0) {
    size_t want = n < CHUNK ? n : CHUNK;
    ssize_t r = c ? r2s__stream_recv(c, fd, &(struct iovec){buf, want}, 1, MSG_DONTWAIT)
                  : r2s__libc.read(fd, buf, want);
    if (r <= 0) break;
    n -= (size_t)r;
  }
}

static bool is_pipe(int fd)
{
  struct stat sb;
  return fstat(fd, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

/* What both directions do first: the kernel's checks of the arguments,
 * in its order, the thread's pipe, a buffer of CHUNK bytes. NULL with
 * *rc the answer (0 for nothing to move) when there is nothing to do. */
static char *begin(int pipe_fd, loff_t *off_in, loff_t *off_out, size_t len, ssize_t *rc)
{
  char *buf = NULL;
  *rc = !is_pipe(pipe_fd) ? -EINVAL : off_in || off_out ? -ESPIPE : len == 0 ? 0 : own_pipe();
  if (*rc == 0 && len && !(buf = malloc(CHUNK))) *rc = -ENOMEM;
  return buf;
}

ssize_t r2s__splice_from_conn(r2s_conn_t *c, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                              unsigned flags)
{
  ssize_t rc;
  char *buf = begin(fd_out, off_in, off_out, len, &rc);
  if (!buf) return rc;
  size_t want = len < own_cap ? len : own_cap;
  /* Seen, not taken: what the pipe does not take stays in the connection. */
  ssize_t n = r2s__stream_recv(c, fd_in, &(struct iovec){buf, want}, 1,
                               MSG_PEEK | ((flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0));
  if (n > 0) {
    ssize_t k = r2s__libc.write(own[1], buf, (size_t)n);
    if (k <= 0) {
      n = k < 0 ? -errno : -EIO;
    } else {
      ssize_t moved = r2s__libc.splice(own[0], NULL, fd_out, NULL, (size_t)k, flags);
      n = moved < 0 ? -errno : moved;
      if (moved > 0) take(c, fd_in, buf, (size_t)moved);
      take(NULL, own[0], buf, (size_t)(moved > 0 ? k - moved : k));
    }
  }
  free(buf);
  return n;
}

ssize_t r2s__splice_into_conn(r2s_conn_t *c, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                              unsigned flags)
{
  ssize_t rc;
  char *buf = begin(fd_in, off_in, off_out, len, &rc);
  if (!buf) return rc;
  /* Seen, not taken: what the connection does not take stays in the pipe.
   * tee waits for bytes as splice would (unless the pipe is O_NONBLOCK, or
   * SPLICE_F_NONBLOCK: our pipe is blocking). */
  ssize_t k = tee(fd_in, own[1], len < own_cap ? len : own_cap, flags & SPLICE_F_NONBLOCK);
  ssize_t n = k < 0 ? -errno : k;
  if (k > 0) {
    ssize_t got = r2s__libc.read(own[0], buf, (size_t)k);
    if (got != k) {
      n = got < 0 ? -errno : -EIO;
    } else {
      int sf = 0; /* SIGPIPE as the kernel's splice gives it */
      if (flags & SPLICE_F_NONBLOCK) sf |= MSG_DONTWAIT;
      if (flags & SPLICE_F_MORE) sf |= MSG_MORE;
      n = r2s__stream_send(c, fd_out, &(struct iovec){buf, (size_t)k}, 1, sf);
      if (n > 0) take(NULL, fd_in, buf, (size_t)n);
    }
    take(NULL, own[0], buf, got < 0 ? (size_t)k : (size_t)(k - got));
  }
  free(buf);
  return n;
}

/* Orderly close in the background: a duplicate of each closed socket is
 * kept until the peer has finished sending frames to it. */
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "libc.h"
#include "lingerer.h"
#include "log.h"
#include "sandbox.h"
#include "stats.h"
#include "thread.h"

/* How long a socket whose bytes have all reached the peer still waits for
 * the peer's last frames. A late frame's reset then costs no data, but it
 * turns the peer's clean end into ECONNRESET. */
#define DELIVERED_NS (2000000000LL)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
/* Grows as needed: a server that ends 1000 connections at once must close
 * each in order. A fixed table of 256 refused the rest, which the kernel
 * then closed with the peer's frames unread, that is with a reset, and a
 * reset discards the data still in our send queue (the 1000-connection
 * test lost 330 streams' tails). */
static struct reaped_s {
  int fd;
  ino_t ino;          /* the socket's: fd is ours only while it still is (mine) */
  int outq;           /* our bytes the peer has not acknowledged */
  long long moved_at; /* when outq last changed */
  r2s_reap_reader_t rd; /* rd.read NULL: bytes are dropped */
} *reaped;
static int nreaped, cap;
static bool started;
static long long stalled_ns; /* r2s__lingerer_bound_ns(), read at the first adopt */

/* Whether r's descriptor is still the socket we took (libc.h): if not,
 * the reaper neither reads from it (that would take the application's
 * bytes) nor closes it. Such an entry is simply forgotten: the socket it
 * held was closed with the application's call. */
static bool mine(const struct reaped_s *r)
{
  return r2s__still_sock(r->fd, r->ino);
}

/* Reads what is there; true once the socket is done (FIN, error, or an
 * application byte after the close: then it is reset, as TCP does). */
static bool drain(const struct reaped_s *r)
{
  int fd = r->fd;
  if (r->rd.read) {
    ssize_t n = r->rd.read(r->rd.arg, fd);
    if (n > 0) {
      struct linger reset = {1, 0};
      (void)r2s__libc.setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    return n != -EAGAIN && n != -EINTR;
  }
  char buf[4096];
  for (;;) {
    ssize_t n = r2s__libc.recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || (errno != EAGAIN && errno != EINTR);
  }
}

/* While our kernel still holds bytes for the peer, a reset would discard
 * them: a socket is kept as long as its send queue moves (a peer that
 * reads slowly), and given up when it stopped for the kernel's own orphan
 * bound. Once all is delivered, only the peer's last frames are waited for. */
static bool given_up(struct reaped_s *r, long long now)
{
  int q;
  if (r2s__libc.ioctl(r->fd, SIOCOUTQ, &q) == 0 && q != r->outq) r->outq = q, r->moved_at = now;
  return now - r->moved_at > (r->outq == 0 ? DELIVERED_NS : stalled_ns);
}

static void *reaper_main(void *arg)
{
  (void)arg;
  r2s__in_shim++; /* everything this thread calls goes straight to libc */
  struct pollfd *p = NULL;
  int pcap = 0;
  r2s_reap_reader_t *freed = NULL; /* readers to release once the lock is let go */
  int nfreed = 0, freecap = 0;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (nreaped == 0) pthread_cond_wait(&wake, &lock);
    if (pcap < cap) {
      struct pollfd *np = realloc(p, (size_t)cap * sizeof *p);
      if (np) p = np, pcap = cap;
    }
    int n = nreaped < pcap ? nreaped : pcap;
    for (int i = 0; i < n; i++) p[i] = (struct pollfd){reaped[i].fd, POLLIN | POLLRDHUP, 0};
    pthread_mutex_unlock(&lock);
    (void)r2s__libc.poll(p, (nfds_t)n, 50);
    long long t = r2s__now_ns();
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nreaped;) {
      int fd = reaped[i].fd;
      bool lost = !mine(&reaped[i]), done = lost;
      for (int j = 0; j < n && !done; j++)
        if (p[j].fd == fd && p[j].revents) done = drain(&reaped[i]);
      done = done || given_up(&reaped[i], t);
      if (done) {
        if (!lost) r2s__libc.close(fd);
        if (reaped[i].rd.release) {
          if (nfreed == freecap) {
            int ncap = freecap ? freecap * 2 : 16;
            r2s_reap_reader_t *nf = realloc(freed, (size_t)ncap * sizeof *nf);
            if (nf) freed = nf, freecap = ncap;
          }
          /* Out of memory: the reader's state is kept for good (a leak),
           * never released under the lock. */
          if (nfreed < freecap) freed[nfreed++] = reaped[i].rd;
        }
        reaped[i] = reaped[--nreaped];
      } else {
        i++;
      }
    }
    if (nfreed) {
      pthread_mutex_unlock(&lock);
      for (int k = 0; k < nfreed; k++) freed[k].release(freed[k].arg);
      nfreed = 0;
      pthread_mutex_lock(&lock);
    }
  }
  return NULL;
}

int r2s__reaper_adopt(int fd, const r2s_reap_reader_t *rd)
{
  if (r2s__sandboxed()) return -EPERM; /* no thread of ours there (sandbox.h) */
  ino_t ino;
  int dup = r2s__keep_fd(fd, &ino);
  if (dup < 0) return dup;
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (!started) {
    stalled_ns = r2s__lingerer_bound_ns();
    rc = r2s__thread_start(reaper_main, NULL);
    started = rc == 0;
  }
  if (rc == 0 && nreaped == cap) {
    int ncap = cap ? cap * 2 : 64;
    struct reaped_s *nr = realloc(reaped, (size_t)ncap * sizeof *nr);
    if (nr)
      reaped = nr, cap = ncap;
    else
      rc = -ENOMEM;
  }
  if (rc == 0) {
    reaped[nreaped].fd = dup;
    reaped[nreaped].ino = ino;
    reaped[nreaped].outq = -1;
    reaped[nreaped].moved_at = r2s__now_ns();
    reaped[nreaped].rd = rd ? *rd : (r2s_reap_reader_t){0};
    nreaped++;
    pthread_cond_signal(&wake);
  }
  pthread_mutex_unlock(&lock);
  if (rc) {
    r2s__libc.close(dup);
    return rc;
  }
  /* Our FIN goes out after everything queued; what the peer sends on is
   * read by the reaper. */
  (void)r2s__libc.shutdown(dup, SHUT_WR);
  return 0;
}

void r2s__reaper_fork_child(void)
{
  /* The thread is not in the child; the duplicates are the parent's. */
  pthread_mutex_init(&lock, NULL);
  pthread_cond_init(&wake, NULL);
  for (int i = 0; i < nreaped; i++) {
    if (mine(&reaped[i])) r2s__libc.close(reaped[i].fd);
    if (reaped[i].rd.release) reaped[i].rd.release(reaped[i].rd.arg);
  }
  nreaped = 0;
  started = false;
}

/* Finishes, from the calling thread, the sockets whose peer is done, and
 * releases their readers as the reaper thread does: an entry dropped
 * without it kept its link for good (LeakSanitizer saw the links of the
 * connections a process finished at exit). The lock is let go around each
 * release, as in the reaper thread; the entry has left the table by then,
 * so nobody else reads it. */
static void sweep_locked(void)
{
  for (int i = 0; i < nreaped;) {
    struct pollfd p = {reaped[i].fd, POLLIN | POLLRDHUP, 0};
    bool lost = !mine(&reaped[i]);
    if (!lost && !(r2s__libc.poll(&p, 1, 0) == 1 && drain(&reaped[i]))) {
      i++;
      continue;
    }
    if (!lost) r2s__libc.close(p.fd);
    r2s_reap_reader_t rd = reaped[i].rd;
    reaped[i] = reaped[--nreaped];
    if (rd.release) {
      pthread_mutex_unlock(&lock);
      rd.release(rd.arg);
      pthread_mutex_lock(&lock);
    }
  }
}

/* Gives the sockets being finished up to ms milliseconds; returns how many
 * are left, with the lock held. The exiting thread looks at them itself, so
 * that whether one is left does not depend on when the reaper thread runs. */
static int wait_locked(int ms)
{
  long long end = r2s__now_ns() + (long long)ms * 1000000LL;
  pthread_mutex_lock(&lock);
  for (;;) {
    sweep_locked();
    if (nreaped == 0 || r2s__now_ns() >= end) break;
    pthread_mutex_unlock(&lock);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&lock);
  }
  return nreaped;
}

void r2s__reaper_exit(int ms)
{
  if (r2s__sandboxed()) return; /* nothing adopted, and no process may start */
  int n = wait_locked(ms);
  int *fds = n ? malloc((size_t)n * sizeof *fds) : NULL;
  int rc = n && !fds ? -ENOMEM : 0;
  for (int i = 0; fds && i < n; i++) fds[i] = reaped[i].fd;
  /* Under the lock: the reaper thread cannot close one of them meanwhile.
   * The lingerer holds its own copies; ours end with the process. */
  if (fds) rc = r2s__lingerer_start(fds, n);
  pthread_mutex_unlock(&lock);
  free(fds);
  if (rc)
    r2s__warn("exit: could not start the process that finishes %d connection(s) (%s); a late frame from "
              "their peers may reset them", n, strerror(-rc));
  else if (n)
    r2s__stat_add(R2S_STAT_exit_lingered, (uint64_t)n);
}

/* Orderly close in the background: a duplicate of each closed socket is
 * kept until the peer has finished sending frames to it. */
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "init.h"
#include "libc.h"
#include "thread.h"

#define LINGER_NS (2000000000LL)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
/* Grows as needed: a server that ends 1000 connections at once must close
 * each in order. A fixed table of 256 refused the rest, which the kernel
 * then closed with the peer's frames unread, that is with a reset, and a
 * reset discards the data still in our send queue (the 1000-connection
 * test lost 330 streams' tails). */
static struct reaped_s {
  int fd;
  long long deadline;
} *reaped;
static int nreaped, cap;
static bool started;


/* Reads what is there; true once the socket is done (FIN, error). */
static bool drain(int fd)
{
  char buf[4096];
  for (;;) {
    ssize_t n = r2s__libc.recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || (errno != EAGAIN && errno != EINTR);
  }
}

static void *reaper_main(void *arg)
{
  (void)arg;
  r2s__in_shim++; /* everything this thread calls goes straight to libc */
  struct pollfd *p = NULL;
  int pcap = 0;
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
      bool done = t > reaped[i].deadline;
      for (int j = 0; j < n && !done; j++)
        if (p[j].fd == fd && p[j].revents) done = drain(fd);
      if (done) {
        r2s__libc.close(fd);
        reaped[i] = reaped[--nreaped];
      } else {
        i++;
      }
    }
  }
  return NULL;
}

int r2s__reaper_adopt(int fd)
{
  int dup = r2s__libc.fcntl(fd, F_DUPFD_CLOEXEC, 512);
  if (dup < 0) return -errno;
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (!started) {
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
    reaped[nreaped].deadline = r2s__now_ns() + LINGER_NS;
    nreaped++;
    pthread_cond_signal(&wake);
  }
  pthread_mutex_unlock(&lock);
  if (rc) {
    r2s__libc.close(dup);
    return rc;
  }
  /* Our FIN goes out after everything queued; what the peer sends on is
   * read and dropped by the reaper. */
  (void)r2s__libc.shutdown(dup, SHUT_WR);
  return 0;
}

void r2s__reaper_fork_child(void)
{
  /* The thread is not in the child; the duplicates are the parent's. */
  pthread_mutex_init(&lock, NULL);
  pthread_cond_init(&wake, NULL);
  for (int i = 0; i < nreaped; i++) r2s__libc.close(reaped[i].fd);
  nreaped = 0;
  started = false;
}

void r2s__reaper_wait(int ms)
{
  long long end = r2s__now_ns() + (long long)ms * 1000000LL;
  pthread_mutex_lock(&lock);
  while (nreaped > 0 && started && r2s__now_ns() < end) {
    pthread_mutex_unlock(&lock);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&lock);
  }
  pthread_mutex_unlock(&lock);
}

/* A small process that goes on finishing our sockets after exit, as the
 * kernel does for plain TCP (lingerer.h). */
#include "lingerer.h"

#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libc.h"
#include "options.h"
#include "proc.h"

#define DEFAULT_BOUND_S 60
#define CAP_BOUNDS      10 /* the lingerer ends after this many bounds at most */
#define NS              1000000000LL

struct lsock {
  int fd;
  int outq;            /* our bytes the peer has not acknowledged yet */
  long long moved_at; /* when outq last changed */
};

long long r2s__lingerer_bound_ns(void)
{
  if (r2s__opt.linger_s) return r2s__opt.linger_s * NS;
  long s = DEFAULT_BOUND_S;
  unsigned long v;
  if (r2s__proc_numbers("/proc/sys/net/ipv4/tcp_fin_timeout", &v, 1) == 1 && v > 0 && v <= 3600) s = (long)v;
  return s * NS;
}

static int by_fd(const void *a, const void *b)
{
  int x = ((const struct lsock *)a)->fd, y = ((const struct lsock *)b)->fd;
  return (x > y) - (x < y);
}

/* Everything below runs in the new processes, which are copies of one
 * thread of a process that may have had many, some of them holding libc's
 * or a sanitizer runtime's locks: only bare system calls, and inlined so
 * that no instrumented function entry runs there either. */
#define ALWAYS_INLINE static inline __attribute__((always_inline, no_sanitize_thread))

/* libc's syscall(), looked up before the copies are made: they call it
 * through this pointer and nothing else of the shim's. */
static r2s_syscall_fn_t bare_call;

ALWAYS_INLINE long long mono_ns(void)
{
  struct timespec ts = {0, 0};
  (void)bare_call(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * NS + ts.tv_nsec;
}

ALWAYS_INLINE _Noreturn void bare_exit(int status)
{
  for (;;) (void)bare_call(SYS_exit_group, status);
}

/* The kernel's struct sigaction: handler first on every architecture. */
struct ksigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  uint64_t mask;
};

/* The application's handlers are code of a process that has exited: a
 * signal runs the default action instead (as across exec, ignored signals
 * stay ignored). Then the signals the caller blocked are let through. */
ALWAYS_INLINE void own_signals(void)
{
  for (int sig = 1; sig <= 64; sig++) {
    struct ksigaction old = {0}, dfl = {0};
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (bare_call(SYS_rt_sigaction, sig, NULL, &old, sizeof old.mask) != 0) continue;
    dfl.handler = sig == SIGPIPE ? SIG_IGN : SIG_DFL;
    if (old.handler != SIG_IGN || sig == SIGPIPE) (void)bare_call(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
  }
  uint64_t none = 0;
  (void)bare_call(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
}

/* Closes every fd but the sorted fds[0..n). */
ALWAYS_INLINE void keep_only(const struct lsock *s, int n)
{
  unsigned from = 0;
  for (int i = 0; i <= n; i++) {
    unsigned to = i < n ? (unsigned)s[i].fd : ~0U;
    if (to > from && bare_call(SYS_close_range, from, to - 1, 0) != 0) {
      /* Before Linux 5.9: one by one, up to the fd limit. */
      unsigned last = to - 1;
      if (i == n) last = from + 65535;
      for (unsigned fd = from; fd <= last; fd++) (void)bare_call(SYS_close, fd);
    }
    if (i < n) from = (unsigned)s[i].fd + 1;
  }
}

/* Reads and drops what is there; true once the socket is done (the peer's
 * end of stream, an error). */
ALWAYS_INLINE bool drained(int fd)
{
  char buf[4096];
  for (;;) {
    long r = bare_call(SYS_recvfrom, fd, buf, sizeof buf, MSG_DONTWAIT, NULL, NULL);
    if (r > 0) continue;
    return r == 0 || (errno != EAGAIN && errno != EINTR);
  }
}

ALWAYS_INLINE _Noreturn void linger(struct lsock *s, struct pollfd *p, int n, long long bound)
{
  (void)bare_call(SYS_setsid);
  (void)bare_call(SYS_chdir, "/");
  own_signals();
  keep_only(s, n);
  long long start = mono_ns();
  for (int i = 0; i < n; i++) s[i].outq = -1, s[i].moved_at = start;
  while (n > 0) {
    for (int i = 0; i < n; i++) p[i] = (struct pollfd){s[i].fd, POLLIN | POLLRDHUP, 0};
    struct timespec tick = {1, 0};
    (void)bare_call(SYS_ppoll, p, (unsigned long)n, &tick, NULL, 0);
    long long now = mono_ns();
    for (int i = 0; i < n;) {
      bool done = p[i].revents && drained(s[i].fd);
      int q;
      if (bare_call(SYS_ioctl, s[i].fd, SIOCOUTQ, &q) == 0 && q != s[i].outq) s[i].outq = q, s[i].moved_at = now;
      /* A peer that stopped taking our bytes (or has them all and keeps
       * its end open) gets what the kernel gives an orphan in FIN_WAIT2. */
      if (done || now - s[i].moved_at > bound || now - start > CAP_BOUNDS * bound) {
        (void)bare_call(SYS_close, s[i].fd);
        s[i] = s[--n];
        p[i] = p[n];
      } else {
        i++;
      }
    }
  }
  bare_exit(0);
}

__attribute__((no_sanitize_thread)) int r2s__lingerer_start(const int *fds, int n)
{
  if (n <= 0) return 0;
  bare_call = r2s__syscall_fn();
  long long bound = r2s__lingerer_bound_ns();
  struct lsock *s = malloc((size_t)n * sizeof *s);
  struct pollfd *p = malloc((size_t)n * sizeof *p);
  int rc = 0;
  if (!s || !p) {
    rc = -ENOMEM;
    goto out_free;
  }
  for (int i = 0; i < n; i++) s[i].fd = fds[i];
  qsort(s, (size_t)n, sizeof *s, by_fd);
  /* No signal may run an application handler in the copies before they
   * have their own dispositions. */
  uint64_t all = ~0ULL, old;
  (void)bare_call(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof all);
  /* The name is inherited at clone: the lingerer is born "r2s-linger", so
   * whoever looks once the application has exited finds it by that name
   * (set only inside it, it could still bear the application's name then:
   * integration.shm.exit-linger-fill saw that race). The application's
   * own name is back before this returns. */
  char name[17] = {0};
  (void)bare_call(SYS_prctl, PR_GET_NAME, name, 0, 0, 0);
  (void)bare_call(SYS_prctl, PR_SET_NAME, "r2s-linger", 0, 0, 0);
  /* Exit signal 0: the application gets no SIGCHLD, and wait() without
   * __WCLONE does not see this child. */
  long mid = bare_call(SYS_clone, 0UL, NULL, NULL, NULL, 0UL);
  if (mid == 0) {
    long pid = bare_call(SYS_clone, 0UL, NULL, NULL, NULL, 0UL);
    if (pid == 0) linger(s, p, n, bound);
    /* The lingerer goes to init (or the nearest subreaper). */
    bare_exit(pid > 0 ? 0 : 1);
  }
  if (mid < 0) {
    rc = -errno;
  } else {
    int status = 0;
    long w;
    do w = bare_call(SYS_wait4, mid, &status, __WCLONE, NULL);
    while (w < 0 && errno == EINTR);
    if (w < 0)
      rc = -errno;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      rc = -ECHILD;
  }
  (void)bare_call(SYS_prctl, PR_SET_NAME, name, 0, 0, 0);
  (void)bare_call(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old);
out_free:
  free(p);
  free(s);
  return rc;
}

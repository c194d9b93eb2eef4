/* A child forked while another thread of its parent holds a lock of the
 * shim can still use its sockets: for each kind of lock (a connection's
 * rx_lock and tx_lock, the connection pool's, the statistics segment's),
 * a thread holds it across fork(), and the child opens a new connection
 * and moves bytes both ways over it and over a connection upgraded to
 * shared memory before the fork. Run under the test build of the module
 * (hold_lock.c's hooks), R2SOCK_UPGRADE=now R2SOCK_TRANSPORT=shm. The
 * child's alarm bounds it; exit 0 when every kind passed. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { HOLD_LINK_RX, HOLD_LINK_TX, HOLD_POOL, HOLD_STATSEG, HOLD_RDMA_DEV, HOLD_KINDS };
static const char *const kind_names[HOLD_KINDS] = {"link rx_lock", "link tx_lock", "connection pool lock",
                                                   "statistics segment lock", "RDMA device lock"};
enum { PATH_SHM = 1 };

static int (*test_lock)(int kind, int fd, int on);
static int (*test_path)(int fd, int tx);
static struct sockaddr_in server;

#define FAIL(...)                                                                                            \
  do {                                                                                                       \
    fprintf(stderr, "fork_locked: " __VA_ARGS__);                                                            \
    fputc('\n', stderr);                                                                                     \
    return -1;                                                                                               \
  } while (0)

static int write_all(int fd, const unsigned char *p, size_t n)
{
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

static int read_all(int fd, unsigned char *p, size_t n)
{
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* The echo server: one thread per connection, until its end of stream. */
static void *echo_conn(void *arg)
{
  int fd = (int)(long)arg;
  unsigned char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || write_all(fd, buf, (size_t)n) < 0) break;
  }
  close(fd);
  return NULL;
}

static void run_echo_server(int lfd)
{
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, echo_conn, (void *)(long)fd) != 0) _exit(1);
    pthread_detach(t);
  }
}

static int connect_server(void)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&server, sizeof server) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* rounds of `len` bytes out and the same bytes back, each round's
 * pattern its own. */
static int exchange(int fd, int rounds, size_t len, unsigned seed)
{
  static unsigned char out[16384], in[16384];
  if (len > sizeof out) len = sizeof out;
  for (int r = 0; r < rounds; r++) {
    for (size_t i = 0; i < len; i++) out[i] = (unsigned char)(seed * 131u + (unsigned)r * 7u + i);
    if (write_all(fd, out, len) < 0) FAIL("write: %s", strerror(errno));
    if (read_all(fd, in, len) < 0) FAIL("read: %s", errno ? strerror(errno) : "end of stream");
    if (memcmp(out, in, len) != 0) FAIL("the bytes that came back differ (round %d)", r);
  }
  return 0;
}

/* Exchanges until both directions of fd are in shared memory. */
static int upgrade(int fd)
{
  for (int r = 0; r < 200; r++) {
    if (exchange(fd, 1, 1024, (unsigned)r) < 0) return -1;
    if (test_path(fd, 1) == PATH_SHM && test_path(fd, 0) == PATH_SHM) return 0;
  }
  FAIL("the connection did not move into shared memory (tx path %d, rx path %d)", test_path(fd, 1),
       test_path(fd, 0));
}

/* The child: a new connection, and the one upgraded before the fork. */
static int child_main(int old)
{
  int fd = connect_server();
  if (fd < 0) FAIL("child: connect: %s", strerror(errno));
  if (upgrade(fd) < 0 || exchange(fd, 64, 16384, 1) < 0) return -1;
  if (exchange(old, 64, 16384, 2) < 0) return -1;
  if (test_path(old, 1) != PATH_SHM || test_path(old, 0) != PATH_SHM)
    FAIL("child: the inherited connection left shared memory");
  close(fd);
  return 0;
}

/* The holder: takes the lock, says so, and lets it go when told or after
 * a while (a fork handler may be waiting for that very lock, and then
 * nobody can tell it). Either way the lock is held when fork() begins. */
typedef struct holder_s {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int kind, fd, rc;
  bool held, go;
} holder_t;

static void *hold(void *arg)
{
  holder_t *h = arg;
  int rc = test_lock(h->kind, h->fd, 1);
  pthread_mutex_lock(&h->m);
  h->rc = rc;
  h->held = true;
  pthread_cond_signal(&h->cv);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += 300 * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  while (!h->go && pthread_cond_timedwait(&h->cv, &h->m, &until) == 0) {
  }
  pthread_mutex_unlock(&h->m);
  if (rc == 0) test_lock(h->kind, h->fd, 0);
  return NULL;
}

static int one_kind(int kind)
{
  int fd = connect_server();
  if (fd < 0) FAIL("connect: %s", strerror(errno));
  if (upgrade(fd) < 0) return -1;
  holder_t h = {.kind = kind, .fd = fd};
  pthread_mutex_init(&h.m, NULL);
  pthread_cond_init(&h.cv, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, hold, &h) != 0) FAIL("pthread_create");
  pthread_mutex_lock(&h.m);
  while (!h.held) pthread_cond_wait(&h.cv, &h.m);
  int rc = h.rc;
  pthread_mutex_unlock(&h.m);
  if (rc == -ENOTSUP) {
    pthread_join(t, NULL);
    close(fd);
    printf("fork_locked: %s: not tested (rdma_dev.c's own fork handler re-initialises it; "
           "no RDMA device here to hold it with)\n",
           kind_names[kind]);
    return 0;
  }
  if (rc < 0) FAIL("cannot hold the %s: %s", kind_names[kind], strerror(-rc));
  fflush(stdout); /* the child must not print the parent's lines again */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* the bound: a child stuck on a lock dies of it */
    _exit(child_main(fd) == 0 ? 0 : 1);
  }
  pthread_mutex_lock(&h.m);
  h.go = true;
  pthread_cond_signal(&h.cv);
  pthread_mutex_unlock(&h.m);
  pthread_join(t, NULL);
  if (pid < 0) FAIL("fork: %s", strerror(errno));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  /* The connection is the child's now: the parent only closes its copy. */
  close(fd);
  if (WIFSIGNALED(status))
    FAIL("%s held at fork: the child died of signal %d%s", kind_names[kind], WTERMSIG(status),
         WTERMSIG(status) == SIGALRM ? " (stuck)" : "");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL("%s held at fork: the child failed", kind_names[kind]);
  printf("fork_locked: %s held at fork: the child moved its bytes\n", kind_names[kind]);
  return 0;
}

int main(void)
{
  test_lock = (int (*)(int, int, int))dlsym(RTLD_DEFAULT, "r2s__test_lock");
  test_path = (int (*)(int, int))dlsym(RTLD_DEFAULT, "r2s__test_path");
  if (!test_lock || !test_path) {
    fprintf(stderr, "fork_locked: run it under libr2sock_testhooks.so (LD_PRELOAD)\n");
    return 1;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  server.sin_family = AF_INET;
  server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof server;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&server, sizeof server) < 0 || listen(lfd, 64) < 0 ||
      getsockname(lfd, (struct sockaddr *)&server, &len) < 0) {
    perror("fork_locked: listen");
    return 1;
  }
  fflush(stdout);
  pid_t echo = fork();
  if (echo == 0) run_echo_server(lfd);
  close(lfd);
  if (echo < 0) {
    perror("fork_locked: fork");
    return 1;
  }
  int failed = 0;
  for (int k = 0; k < HOLD_KINDS; k++) failed |= one_kind(k) != 0;
  kill(echo, SIGKILL);
  waitpid(echo, NULL, 0);
  if (!failed) printf("fork_locked: ok\n");
  return failed;
}

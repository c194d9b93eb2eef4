/*
 * fd_takeover: an application that closes descriptors it did not open
 * (close_range, as a daemon or a pre-exec cleanup does) and gets their
 * numbers back for files of its own, while connections stay open.
 *
 * One process holds both ends of NCONN connections (a listener on ADDR, one
 * thread, blocking calls that always fit the rings). It moves bytes both ways
 * on each, then closes every descriptor from FIRST up (close_range) and opens
 * socketpairs whose ends take those numbers back (F_DUPFD from FIRST: the
 * impostors). Then more bytes both ways, byte-exact. That is phase 1: the
 * RDMA transport keeps a duplicate of each connection's socket at 512 or
 * above for its progress thread (doorbells, TCP_INFO, shutdown on failure).
 * Phase 2: the client end of every connection is closed, and at once the
 * numbers from the lowest free one up are closed and taken back the same
 * way, each impostor with a byte waiting to be read: the shim finishes an
 * upgraded connection's close in the background through a duplicate at 512
 * or above (reaper.h), which reads and drops what arrives until the peer's
 * end of stream (the server ends stay open meanwhile) and then closes it.
 * After 3 s (the reaper gives a socket 2 s once its bytes are delivered)
 * every impostor of both phases must still be open, shut down in neither
 * direction, still hold its byte (phase 2), and its twin must have received
 * nothing; then the server ends are closed. FIRST defaults to 512.
 *
 *   usage: fd_takeover ADDR [NCONN] [FIRST]
 * Exits 0 when every check held, 1 on a failed check, 2 on bad usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_CONN 8
#define CHUNK 65536 /* per direction and round: far below any ring */
#define MAX_IMPOSTORS 64

static int fail(const char *what)
{
  fprintf(stderr, "fd_takeover: FAIL: %s (%s)\n", what, strerror(errno));
  return 1;
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

static int write_all(int fd, const unsigned char *b, size_t n)
{
  while (n) {
    ssize_t k = write(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k, n -= (size_t)k;
  }
  return 0;
}

static int read_all(int fd, unsigned char *b, size_t n)
{
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k, n -= (size_t)k;
  }
  return 0;
}

/* CHUNK bytes from a to b and from b to a, compared. */
static int exchange(int a, int b, unsigned seed)
{
  static unsigned char out[CHUNK], in[CHUNK];
  pattern(out, CHUNK, seed);
  if (write_all(a, out, CHUNK) < 0 || read_all(b, in, CHUNK) < 0) return fail("a -> b");
  if (memcmp(out, in, CHUNK) != 0) {
    errno = 0;
    return fail("a -> b: the bytes differ");
  }
  pattern(out, CHUNK, seed + 1);
  if (write_all(b, out, CHUNK) < 0 || read_all(a, in, CHUNK) < 0) return fail("b -> a");
  if (memcmp(out, in, CHUNK) != 0) {
    errno = 0;
    return fail("b -> a: the bytes differ");
  }
  return 0;
}

/* A socketpair whose first end takes the lowest free number from `from`
 * on (the impostor); *twin is its other end. */
static int take_number(int from, int *imp, int *twin)
{
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) < 0) return fail("socketpair");
  *imp = fcntl(sp[0], F_DUPFD, from);
  if (*imp < 0) return fail("F_DUPFD");
  close(sp[0]);
  *twin = sp[1];
  return 0;
}

int main(int argc, char **argv)
{
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: fd_takeover ADDR [NCONN] [FIRST]\n");
    return 2;
  }
  int nconn = argc > 2 ? atoi(argv[2]) : 2;
  int first = argc > 3 ? atoi(argv[3]) : 512;
  if (nconn < 1 || nconn > MAX_CONN || first < 3) {
    fprintf(stderr, "fd_takeover: NCONN 1-%d, FIRST >= 3\n", MAX_CONN);
    return 2;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET};
  if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
    fprintf(stderr, "fd_takeover: bad address %s\n", argv[1]);
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t sl = sizeof sa;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, MAX_CONN) < 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
    return fail("listen");
  int cli[MAX_CONN], srv[MAX_CONN];
  for (int i = 0; i < nconn; i++) {
    cli[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (cli[i] < 0 || connect(cli[i], (struct sockaddr *)&sa, sizeof sa) < 0) return fail("connect");
    srv[i] = accept(lfd, NULL, NULL);
    if (srv[i] < 0) return fail("accept");
    /* high enough that the rings are in use before the takeover */
    for (unsigned r = 0; r < 4; r++)
      if (exchange(cli[i], srv[i], 10 * (unsigned)i + r)) return 1;
  }
  close(lfd);

  if (syscall(SYS_close_range, (unsigned)first, ~0u, 0) != 0) return fail("close_range");
  /* The numbers come back in order: an impostor socket under each one a
   * descriptor of the shim's may have held. */
  int imp[2 * MAX_IMPOSTORS], twin[2 * MAX_IMPOSTORS], nimp = 0;
  for (; nimp < MAX_IMPOSTORS; nimp++)
    if (take_number(first, &imp[nimp], &twin[nimp])) return 1;
  printf("fd_takeover: %d connections; impostors at %d to %d\n", nconn, imp[0], imp[nimp - 1]);

  for (int i = 0; i < nconn; i++)
    for (unsigned r = 0; r < 4; r++)
      if (exchange(cli[i], srv[i], 100 + 10 * (unsigned)i + r)) return 1;
  /* Phase 2: the closes go to the background, through duplicates at the
   * lowest free numbers from FIRST on, kept while the peers stay open. */
  int second = fcntl(twin[0], F_DUPFD, first);
  if (second < 0 || close(second) < 0) return fail("F_DUPFD probe");
  for (int i = 0; i < nconn; i++)
    if (close(cli[i]) < 0) return fail("close");
  if (syscall(SYS_close_range, (unsigned)second, ~0u, 0) != 0) return fail("close_range");
  int nimp1 = nimp;
  for (; nimp < 2 * nimp1; nimp++) {
    if (take_number(second, &imp[nimp], &twin[nimp])) return 1;
    if (send(twin[nimp], "q", 1, MSG_DONTWAIT) != 1) return fail("send to an impostor");
  }
  printf("fd_takeover: connections closed; impostors at %d to %d\n", imp[nimp1], imp[nimp - 1]);
  sleep(3);

  int bad = 0;
  for (int k = 0; k < nimp; k++) {
    char c;
    if (fcntl(imp[k], F_GETFD) < 0) {
      fprintf(stderr, "fd_takeover: FAIL: impostor %d was closed\n", imp[k]);
      bad = 1;
      continue;
    }
    if (k >= nimp1 && (recv(imp[k], &c, 1, MSG_DONTWAIT) != 1 || c != 'q')) {
      fprintf(stderr, "fd_takeover: FAIL: impostor %d lost the byte waiting in it\n", imp[k]);
      bad = 1;
    }
    ssize_t n = recv(twin[k], &c, 1, MSG_DONTWAIT);
    if (n >= 0 || errno != EAGAIN) {
      fprintf(stderr, "fd_takeover: FAIL: impostor %d was %s\n", imp[k],
              n > 0 ? "written to" : n == 0 ? "shut down for writing" : "broken");
      bad = 1;
    }
    /* shut down for reading would make this send fail with EPIPE */
    if (send(twin[k], "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1 || recv(imp[k], &c, 1, MSG_DONTWAIT) != 1) {
      fprintf(stderr, "fd_takeover: FAIL: impostor %d no longer reads\n", imp[k]);
      bad = 1;
    }
  }
  for (int i = 0; i < nconn; i++)
    if (close(srv[i]) < 0) return fail("close");
  if (bad) return 1;
  printf("fd_takeover: PASS: %d impostors untouched, every byte verified\n", nimp);
  return 0;
}

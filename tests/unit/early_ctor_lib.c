/* Code that uses TCP while a process starts: early_transfer() moves 1 MiB
 * over loopback between two threads and leaves a thread that keeps making
 * sockets. It runs twice: from the program's preinit_array, before any
 * library constructor (the shim's included: the shim must start itself from
 * inside that first wrapper call, with libc's environ not set yet), and from
 * this library's own constructor. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PAYLOAD (1 << 20)

static struct sockaddr_in server_addr;
static pthread_t writer, churner;
int early_ctor_ok; /* transfers that verified, read by the program's main */

static void die(const char *what)
{
  perror(what);
  _exit(3);
}

static void *write_payload(void *arg)
{
  (void)arg;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) < 0) die("connect");
  static unsigned char buf[PAYLOAD];
  for (int i = 0; i < PAYLOAD; i++) buf[i] = (unsigned char)(i * 7 + 3);
  for (size_t off = 0; off < PAYLOAD;) {
    ssize_t n = write(fd, buf + off, PAYLOAD - off);
    if (n <= 0) die("write");
    off += (size_t)n;
  }
  close(fd);
  return NULL;
}

/* Sockets made and closed in a loop while the process starts. */
static void *churn(void *arg)
{
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    int d = dup(fd);
    close(fd);
    if (d >= 0) close(d);
  }
  return NULL;
}

void early_transfer(const char *who)
{
  char marker[128];
  int m = snprintf(marker, sizeof marker, "early_ctor: socket calls from the %s\n", who);
  if (write(2, marker, (size_t)m) < 0) _exit(3);
  static int churning;
  if (!churning++ && pthread_create(&churner, NULL, churn, NULL) != 0) die("pthread_create");
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) die("socket");
  server_addr.sin_family = AF_INET;
  server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof server_addr;
  if (bind(lfd, (struct sockaddr *)&server_addr, sizeof server_addr) < 0 || listen(lfd, 4) < 0 ||
      getsockname(lfd, (struct sockaddr *)&server_addr, &len) < 0)
    die("listen");
  if (pthread_create(&writer, NULL, write_payload, NULL) != 0) die("pthread_create");
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) die("accept");
  /* One byte of room past the payload: the last read asks for it, so that
   * an extra byte would be seen (and land inside the buffer). */
  static unsigned char buf[PAYLOAD + 1];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf + got, PAYLOAD - got + (got == PAYLOAD));
    if (n < 0) die("read");
    if (n == 0) break;
    got += (size_t)n;
    if (got > PAYLOAD) break;
  }
  int bad = got != PAYLOAD;
  for (int i = 0; !bad && i < PAYLOAD; i++) bad = buf[i] != (unsigned char)(i * 7 + 3);
  close(fd);
  close(lfd);
  pthread_join(writer, NULL);
  early_ctor_ok += !bad;
  if (bad) fprintf(stderr, "early_ctor: %s got %zu bytes, content wrong\n", who, got);
}

__attribute__((constructor)) static void early(void)
{
  early_transfer("library constructor");
}

__attribute__((destructor)) static void late(void)
{
  pthread_join(churner, NULL);
}

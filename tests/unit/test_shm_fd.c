/* Rings handed over by file descriptor (src/transport/shm_fd.h), on real
 * memfds and Unix sockets in one process: what a taker accepts as a ring,
 * that the ring it takes is the one the owner sent, and that whatever else
 * reaches its socket (another process's message first, a wrong nonce, two
 * descriptors) is refused without keeping a descriptor. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "libc.h"
#include "transport/shm_fd.h"

#define BYTES (64u << 10) /* a ring's bytes, control page included */

static int open_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static int setup(void **state)
{
  (void)state;
  return r2s__libc_load();
}

static void same_file(int a, int b)
{
  struct stat sa, sb;
  assert_int_equal(fstat(a, &sa), 0);
  assert_int_equal(fstat(b, &sb), 0);
  assert_true(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

/* Connects to the taker's socket the way another process could, and
 * sends `len` bytes of msg with the fds given. */
static void intrude(const r2s_fetch_t *at, const void *msg, size_t len, const int *fds, int nfds)
{
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, at->addr, at->addr_len);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  assert_true(s >= 0);
  assert_int_equal(connect(s, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + at->addr_len)), 0);
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } c;
  memset(&c, 0, sizeof c);
  struct iovec v = {(void *)msg, len};
  struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
  if (nfds) {
    m.msg_control = c.buf;
    m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
  }
  assert_int_equal(sendmsg(s, &m, 0), (ssize_t)len);
  close(s);
}

/* A ring is a memfd whose size and seals are fixed; nothing else passes. */
static void test_what_passes_as_a_ring(void **state)
{
  (void)state;
  int fd = r2s__shm_fd_ring(BYTES, 8192);
  assert_true(fd >= 0);
  assert_int_equal(r2s__shm_fd_check(fd, BYTES), 0);
  assert_int_equal(r2s__shm_fd_check(fd, BYTES / 2), -EPROTO); /* not the size the offer said */
  assert_int_equal(ftruncate(fd, BYTES / 2), -1);              /* the owner cannot take pages away */
  assert_int_equal(errno, EPERM);
  assert_int_equal(ftruncate(fd, BYTES * 2), -1);
  assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1); /* nor change its seals */
  struct stat sb;
  assert_int_equal(fstat(fd, &sb), 0);
  assert_int_equal(sb.st_blocks * 512, 8192); /* what was reserved, no more */
  close(fd);

  int bare = memfd_create("bare", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  assert_true(bare >= 0);
  assert_int_equal(ftruncate(bare, BYTES), 0);
  assert_int_equal(r2s__shm_fd_check(bare, BYTES), -EPROTO); /* unsealed */
  assert_int_equal(fcntl(bare, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  assert_int_equal(r2s__shm_fd_check(bare, BYTES), -EPROTO); /* its seals may still change */
  close(bare);

  int ro = memfd_create("ro", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  assert_true(ro >= 0);
  assert_int_equal(ftruncate(ro, BYTES), 0);
  assert_int_equal(fcntl(ro, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
  assert_int_equal(r2s__shm_fd_check(ro, BYTES), -EPROTO); /* cannot be written */
  close(ro);

  char name[64];
  snprintf(name, sizeof name, "/r2s-test-shm-fd-%d", (int)getpid());
  int named = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  assert_true(named >= 0);
  shm_unlink(name);
  assert_int_equal(ftruncate(named, BYTES), 0);
  assert_int_equal(r2s__shm_fd_check(named, BYTES), -EPROTO); /* a /dev/shm segment can shrink */
  close(named);

  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(r2s__shm_fd_check(p[0], BYTES), -EPROTO);
  close(p[0]), close(p[1]);
}

/* The taker gets the very file the owner sent, and keeps nothing else. */
static void test_round_trip(void **state)
{
  (void)state;
  int before = open_fds();
  r2s_fetch_t at;
  ino_t ino;
  int l = r2s__shm_fd_listen(&at, &ino);
  assert_true(l >= 0);
  assert_true(at.addr_len > 1 && at.addr[0] == 0); /* abstract, named by the kernel */
  int ring = r2s__shm_fd_ring(BYTES, 4096);
  assert_true(ring >= 0);
  uint8_t nonce[R2S_NONCE_LEN], zero[R2S_NONCE_LEN] = {0};
  assert_int_equal(r2s__shm_fd_send(&at, ring, nonce), 0);
  assert_memory_not_equal(nonce, zero, R2S_NONCE_LEN);
  int got = r2s__shm_fd_take(l, ino, nonce);
  assert_true(got >= 0);
  same_file(got, ring);
  assert_int_equal(r2s__shm_fd_check(got, BYTES), 0);
  close(got), close(ring);
  r2s__shm_fd_unlisten(l, ino);
  assert_int_equal(open_fds(), before);
}

/* Messages that are not the owner's, reaching the taker's socket before
 * it: a wrong nonce with a ring of another's, and the right nonce (as if
 * copied from the frame) with two descriptors, cut short, or with none.
 * Each is refused and its descriptors closed; the owner's, behind one of
 * them, is taken. */
static void test_intruders_refused(void **state)
{
  (void)state;
  int before = open_fds();
  r2s_fetch_t at;
  ino_t ino;
  int l = r2s__shm_fd_listen(&at, &ino);
  int ring = r2s__shm_fd_ring(BYTES, 4096), fake = r2s__shm_fd_ring(BYTES, 4096);
  assert_true(l >= 0 && ring >= 0 && fake >= 0);
  uint8_t nonce[R2S_NONCE_LEN], wrong[R2S_NONCE_LEN];
  memset(nonce, 0xa5, sizeof nonce);
  memset(wrong, 0x5a, sizeof wrong);
  int two[2] = {fake, fake};
  intrude(&at, nonce, sizeof nonce, two, 2);
  intrude(&at, nonce, sizeof nonce - 1, &fake, 1);
  intrude(&at, nonce, sizeof nonce, &fake, 0);
  intrude(&at, wrong, sizeof wrong, &fake, 1);
  assert_int_equal(r2s__shm_fd_take(l, ino, nonce), -ENOMSG);
  assert_int_equal(open_fds(), before + 3);

  intrude(&at, wrong, sizeof wrong, &fake, 1);
  assert_int_equal(r2s__shm_fd_send(&at, ring, nonce), 0);
  int got = r2s__shm_fd_take(l, ino, nonce);
  assert_true(got >= 0);
  same_file(got, ring);
  close(got), close(ring), close(fake), close(l);
  assert_int_equal(open_fds(), before);
}

/* Nothing with the nonce: -ENOMSG, and no descriptor kept. */
static void test_wrong_nonce(void **state)
{
  (void)state;
  int before = open_fds();
  r2s_fetch_t at;
  ino_t ino;
  int l = r2s__shm_fd_listen(&at, &ino);
  int ring = r2s__shm_fd_ring(BYTES, 4096);
  assert_true(l >= 0 && ring >= 0);
  uint8_t nonce[R2S_NONCE_LEN];
  assert_int_equal(r2s__shm_fd_take(l, ino, nonce), -ENOMSG); /* nobody sent anything */
  assert_int_equal(r2s__shm_fd_send(&at, ring, nonce), 0);
  nonce[3] ^= 1;
  assert_int_equal(r2s__shm_fd_take(l, ino, nonce), -ENOMSG);
  close(ring), close(l);
  assert_int_equal(open_fds(), before);
}

/* The application closed our listener (closefrom, say) and a socket of
 * its own got the number: we take nothing from it and leave it open. */
static void test_listener_replaced(void **state)
{
  (void)state;
  r2s_fetch_t at, theirs;
  ino_t ino, their_ino;
  int l = r2s__shm_fd_listen(&at, &ino);
  int other = r2s__shm_fd_listen(&theirs, &their_ino);
  int ring = r2s__shm_fd_ring(BYTES, 4096);
  assert_true(l >= 0 && other >= 0 && ring >= 0);
  uint8_t nonce[R2S_NONCE_LEN];
  assert_int_equal(r2s__shm_fd_send(&theirs, ring, nonce), 0); /* waits on their socket */
  assert_int_equal(dup2(other, l), l);                          /* ours is gone, theirs in its place */
  close(other);
  assert_int_equal(r2s__shm_fd_take(l, ino, nonce), -EBADF);
  r2s__shm_fd_unlisten(l, ino);
  assert_true(fcntl(l, F_GETFD) >= 0); /* still open: not ours to close */
  int got = r2s__shm_fd_take(l, their_ino, nonce); /* and its connection still queued */
  assert_true(got >= 0);
  same_file(got, ring);
  close(got), close(ring), close(l);
}

/* The owner sends only to an abstract socket that listens. */
static void test_send_refuses(void **state)
{
  (void)state;
  int before = open_fds();
  int ring = r2s__shm_fd_ring(BYTES, 4096);
  assert_true(ring >= 0);
  uint8_t nonce[R2S_NONCE_LEN];
  r2s_fetch_t path = {.addr_len = 9};
  memcpy(path.addr, "/tmp/sock", 9);
  assert_int_equal(r2s__shm_fd_send(&path, ring, nonce), -EINVAL);
  r2s_fetch_t none = {.addr_len = 12};
  memcpy(none.addr, "\0r2s-nobody", 12);
  assert_int_equal(r2s__shm_fd_send(&none, ring, nonce), -ECONNREFUSED);
  close(ring);
  assert_int_equal(open_fds(), before);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_what_passes_as_a_ring), cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_intruders_refused),     cmocka_unit_test(test_wrong_nonce),
      cmocka_unit_test(test_listener_replaced), cmocka_unit_test(test_send_refuses),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

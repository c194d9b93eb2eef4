/*
 * sandbox_echo: a TCP echo server that confines its own system calls
 * halfway through, as OpenSSH's pre-authentication child does (for
 * tests/integration/sandbox.sh).
 *
 *   sandbox_echo --port P --via prctl|syscall --before N
 *
 * Listens on 127.0.0.1:P, accepts one connection, echoes the first N bytes,
 * then installs a seccomp filter, through prctl(PR_SET_SECCOMP) or
 * syscall(SYS_seccomp) as --via says, that lets through only what an echo
 * loop over read(2) and write(2) needs and kills the process on anything
 * else. It echoes the rest of the stream the same way, shuts its sending
 * side down, and exits 0. Exit status: 0 OK, 1 an I/O error, 2 bad usage;
 * a call the filter refuses ends it with SIGSYS.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ALLOW(nr)                                                                                            \
  BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* What the loop below and the C library's exit path need, as a sandbox
 * written for them would list; nothing for files, sockets or threads. */
static struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    ALLOW(SYS_read),
    ALLOW(SYS_write),
    ALLOW(SYS_shutdown),
    ALLOW(SYS_close),
    ALLOW(SYS_exit),
    ALLOW(SYS_exit_group),
    ALLOW(SYS_rt_sigreturn),
    ALLOW(SYS_futex),
    ALLOW(SYS_brk),
    ALLOW(SYS_mmap),
    ALLOW(SYS_munmap),
    ALLOW(SYS_madvise),
    ALLOW(SYS_getpid),
    ALLOW(SYS_clock_gettime),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

static void say(const char *msg)
{
  (void)!write(2, msg, strlen(msg));
}

static int echo(int fd, size_t limit)
{
  char buf[16384];
  size_t done = 0;
  while (done < limit) {
    size_t want = limit - done < sizeof buf ? limit - done : sizeof buf;
    ssize_t n = read(fd, buf, want);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return -1;
      off += w;
    }
    done += (size_t)n;
  }
  return 1;
}

int main(int argc, char **argv)
{
  int port = -1;
  const char *via = NULL;
  long before = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--port") == 0)
      port = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--via") == 0)
      via = argv[i + 1];
    else if (strcmp(argv[i], "--before") == 0)
      before = atol(argv[i + 1]);
  }
  if (port <= 0 || before < 0 || !via || (strcmp(via, "prctl") != 0 && strcmp(via, "syscall") != 0)) {
    say("usage: sandbox_echo --port P --via prctl|syscall --before N\n");
    return 2;
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0) {
    perror("sandbox_echo: listen");
    return 1;
  }
  int fd = accept(ls, NULL, NULL);
  if (fd < 0) {
    perror("sandbox_echo: accept");
    return 1;
  }
  close(ls);
  int rc = echo(fd, (size_t)before);
  if (rc < 0) {
    perror("sandbox_echo: echo before the filter");
    return 1;
  }
  struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
    perror("sandbox_echo: PR_SET_NO_NEW_PRIVS");
    return 1;
  }
  long set = strcmp(via, "prctl") == 0 ? prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)
                                       : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
  if (set < 0) {
    perror("sandbox_echo: seccomp");
    return 1;
  }
  say("sandbox_echo: filter installed\n");
  if (rc > 0 && echo(fd, (size_t)-1) < 0) {
    say("sandbox_echo: echo in the sandbox failed\n");
    return 1;
  }
  if (shutdown(fd, SHUT_WR) < 0) return 1;
  say("sandbox_echo: OK\n");
  return 0;
}

/* Which processes the shared-memory sweeps take for gone (r2s__proc_gone):
 * a killed process's names are removed by whoever sweeps next, and the last
 * sweep of a test is often its peer's, made the moment it sees the stream
 * end. From then on the dying process must count as gone, through every
 * state it passes: exiting, zombie, reaped, including a reap that lands in
 * the middle of the check. A live process never counts as gone. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "libc.h"
#include "proc.h"

#define ROUNDS 2000
#define CHECKS_AFTER_REAP 8

/* fork()s a child that holds the write end of *fd_out's pipe and waits for
 * the read end's EOF, then _exit()s: the parent sees the pipe end as the
 * child's files close (like a peer seeing a killed process's sockets close).
 * Returns the child's pid; *fd_out is the read end. */
static pid_t spawn(int *fd_out, int *go_out)
{
  int p[2], g[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(pipe(g), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    close(g[1]);
    char b;
    while (read(g[0], &b, 1) > 0) {}
    _exit(0);
  }
  close(p[1]);
  close(g[0]);
  *fd_out = p[0];
  *go_out = g[1];
  return pid;
}

static void await_eof(int fd)
{
  char b;
  ssize_t n;
  while ((n = read(fd, &b, 1)) != 0) assert_true(n > 0 || errno == EINTR);
  close(fd);
}

static int setup(void **state)
{
  (void)state;
  return r2s__libc_load();
}

static void test_live_zombie_reaped(void **state)
{
  (void)state;
  int rd, go;
  pid_t pid = spawn(&rd, &go);
  assert_false(r2s__proc_gone(pid));
  assert_false(r2s__proc_gone((int)getpid()));
  close(go); /* the child exits */
  await_eof(rd);
  /* A zombie until reaped: look without reaping. */
  siginfo_t si;
  memset(&si, 0, sizeof si);
  assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
  assert_true(r2s__proc_gone(pid));
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  assert_true(r2s__proc_gone(pid));
}

struct reap {
  pid_t pid;
  int done; /* atomic: the child was reaped */
};

static void *reaper(void *arg)
{
  struct reap *r = arg;
  assert_int_equal(waitpid(r->pid, NULL, 0), r->pid);
  __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Once the pipe has ended, the child is exiting, then a zombie, then reaped
 * by another thread while this one keeps checking: every check says gone. */
static void test_dying_process_is_gone_throughout(void **state)
{
  (void)state;
  unsigned checks = 0;
  for (int round = 0; round < ROUNDS; round++) {
    int rd, go;
    struct reap r = {.pid = spawn(&rd, &go), .done = 0};
    close(go);
    await_eof(rd);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, reaper, &r), 0);
    /* Up to the reap and a few checks past it (not more: a reaped pid can be
     * reused, though not within microseconds). */
    for (int after = 0; after < CHECKS_AFTER_REAP;) {
      if (!r2s__proc_gone(r.pid)) fail_msg("round %d: pid %d, on its way out, was taken for alive", round, (int)r.pid);
      checks++;
      if (__atomic_load_n(&r.done, __ATOMIC_ACQUIRE)) after++;
    }
    assert_int_equal(pthread_join(t, NULL), 0);
  }
  print_message("%u checks over %d dying processes, all gone\n", checks, ROUNDS);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_live_zombie_reaped),
      cmocka_unit_test(test_dying_process_is_gone_throughout),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

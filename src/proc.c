/* What /proc says: a process's stat fields, whether it is gone, and the
 * numbers of a kernel setting. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "libc.h"

const char *r2s__proc_stat(int pid, char *buf, size_t len)
{
  char path[64];
  if (pid)
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
  else
    snprintf(path, sizeof path, "/proc/self/stat");
  if (r2s__read_small_raw(path, buf, len) < 0) return NULL;
  /* The name may hold spaces and parentheses: the last ')' ends it. */
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p + 2 : NULL;
}

/* The kernel's PF_EXITING (include/linux/sched.h), in the flags field of
 * /proc/PID/stat: set as a process starts to exit, before its files close. */
#define PROC_EXITING 0x4u

/* A process killed with SIGKILL stays a zombie until its parent reaps it,
 * and its peer, which notices the kill at once, may exit (and sweep) before
 * that: a sweep that took zombies for alive left their names behind.
 * Earlier still, the peer sees the end of the stream as soon as the killed
 * process's sockets close, during its exit and before it is a zombie: hence
 * the exiting flag. And the parent may reap it between our two looks. */
bool r2s__proc_gone(int pid)
{
  if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
  char buf[1024];
  const char *f = r2s__proc_stat(pid, buf, sizeof buf);
  char state = 0;
  unsigned flags = 0;
  /* Unreadable: reaped since kill() (CI's fault-kill-early lost its last
   * victim's statistics segment that way, now and then). Ask again. */
  if (!f || sscanf(f, "%c %*d %*d %*d %*d %*d %u", &state, &flags) < 1)
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
  return state == 'Z' || state == 'X' || (flags & PROC_EXITING);
}

int r2s__proc_numbers(const char *path, unsigned long *v, int n)
{
  char buf[128];
  if (r2s__read_small_raw(path, buf, sizeof buf) < 0) return -1;
  const char *p = buf;
  int k = 0;
  for (; k < n; k++) {
    char *end;
    unsigned long x = strtoul(p, &end, 10);
    if (end == p) break;
    v[k] = x;
    p = end;
  }
  return k;
}

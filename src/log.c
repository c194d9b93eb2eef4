/* Log lines: stack-formatted, one write(2) each, errno preserved. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "libc.h"
#include "sandbox.h"

int r2s__log_level = R2S_LOG_WARN;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

int r2s__write_all(int fd, const char *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = r2s__libc.write ? r2s__libc.write(fd, buf, len) : -1;
    if (n < 0) {
      if (errno == EINTR) continue;
      return r2s__libc.write ? -errno : -ENOSYS;
    }
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

void r2s__log_write(int level, const char *fmt, ...)
{
  /* A sandboxed process's stderr is the application's to use under its
   * own limits (OpenSSH's sets RLIMIT_FSIZE to 0: a write to a file there
   * kills it with SIGXFSZ), so nothing of ours goes there. */
  if (r2s__sandboxed()) return;
  int saved = errno;
  char line[512];
  int n = snprintf(line, sizeof line, "r2sock[%d]: %s: ", (int)getpid(),
                   level_names[level < 0   ? 0
                               : level > 3 ? 3
                                           : level]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2) len = sizeof line - 2; /* truncated, keep the newline */
  line[len++] = '\n';
  (void)r2s__write_all(2, line, len);
  errno = saved;
}

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_util.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char watchdog_msg[160];
static size_t watchdog_len;

static void watchdog_fired(int sig)
{
  (void)sig;
  /* Only async-signal-safe calls here; the message was formatted in advance. */
  ssize_t r = write(STDERR_FILENO, watchdog_msg, watchdog_len);
  (void)r;
  _exit(SC_EXIT_TIMEOUT);
}

void sc_watchdog(const char *who, unsigned seconds)
{
  struct sigaction sa;

  int n = snprintf(watchdog_msg, sizeof(watchdog_msg), "%s[%ld]: TIMEOUT: no completion after %u s\n", who,
                   (long)getpid(), seconds);
  watchdog_len = n < 0 ? 0 : ((size_t)n < sizeof(watchdog_msg) ? (size_t)n : sizeof(watchdog_msg) - 1);

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = watchdog_fired;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, NULL) != 0) sc_die(SC_EXIT_FAIL, "sigaction(SIGALRM): %s", strerror(errno));
  sa.sa_handler = SIG_IGN;
  if (sigaction(SIGPIPE, &sa, NULL) != 0) sc_die(SC_EXIT_FAIL, "sigaction(SIGPIPE): %s", strerror(errno));
  alarm(seconds);
}

int sc_parse_size(const char *text, uint64_t *out)
{
  char *end;
  unsigned shift = 0;

  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') return -EINVAL;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  default:
    break;
  }
  if (*end != '\0' || (shift && v > (UINT64_MAX >> shift))) return -EINVAL;
  *out = (uint64_t)v << shift;
  return 0;
}

int sc_parse_int(const char *text, long min, long max, long *out)
{
  char *end;

  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return -EINVAL;
  *out = v;
  return 0;
}

void sc_die(int code, const char *fmt, ...)
{
  va_list ap;

  fprintf(stderr, "%s[%ld]: ", program_invocation_short_name, (long)getpid());
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

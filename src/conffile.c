/* The rules file: reading it safely inside any process, splitting it into
 * lines, and handing each line to the options table or to the rules. */
#include "conffile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libc.h"

/* A message about line `line` of the file; counts it as bad when it is. */
static void bad_line(r2s_conf_t *cf, unsigned line, const char *msg)
{
  cf->bad++;
  if (cf->warn) cf->warn(cf->arg, cf->file, line, msg);
}

/* `NAME = value`: t is the line without its comment and outer blanks. */
static void option_line(r2s_conf_t *cf, unsigned line, char *t)
{
  char msg[256], q[64];
  size_t nlen = strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
  char *p = t + nlen;
  while (*p == ' ' || *p == '\t') p++;
  if (nlen == 0 || *p != '=') {
    snprintf(msg, sizeof msg, "expected 'NAME = value' or 'rule KEY=VALUE...', found '%s'",
             r2s__printable(t, strlen(t), q, sizeof q));
    bad_line(cf, line, msg);
    return;
  }
  const char *value = p + 1;
  while (*value == ' ' || *value == '\t') value++;
  int id = r2s__option_find(t, nlen);
  if (id < 0) {
    r2s__printable(t, nlen, q, sizeof q);
    if (nlen > 7 && strncasecmp(t, "R2SOCK_", 7) == 0)
      snprintf(msg, sizeof msg, "unknown option '%s' (write option names without R2SOCK_)", q);
    else
      snprintf(msg, sizeof msg, "unknown option '%s' (r2sock(7) lists the options)", q);
    bad_line(cf, line, msg);
    return;
  }
  if (id == R2S_OPT_CONFIG) {
    bad_line(cf, line, "CONFIG names this file: it can only be set in the environment (R2SOCK_CONFIG)");
    return;
  }
  const char *accepted;
  bool locked = cf->locked && cf->locked[id];
  /* A line the environment overrides is still checked, into a scratch
   * copy, so that --check reports it and the warning does not wait for the
   * day the variable is unset. */
  r2s_options_t scratch = {0};
  bool ok = r2s__option_parse(locked ? &scratch : cf->opt, id, value, &accepted);
  if (locked) r2s__options_release(&scratch);
  if (!ok) {
    snprintf(msg, sizeof msg, "%s = %s is not valid (expected %s)", r2s__option_name(id),
             r2s__printable(value, strlen(value), q, sizeof q), accepted);
    bad_line(cf, line, msg);
    return;
  }
  cf->set[id] = true;
  cf->options++;
}

/* One line, NUL-terminated in t (len bytes, no newline). */
static void one_line(r2s_conf_t *cf, unsigned line, char *t, size_t len)
{
  char msg[320];
  if (memchr(t, '\0', len)) {
    bad_line(cf, line, "a NUL byte in the line");
    return;
  }
  if (len && t[len - 1] == '\r') t[--len] = '\0';
  /* The comment: from a '#' at the start or after a blank. */
  for (size_t i = 0; i < len; i++) {
    if (t[i] == '#' && (i == 0 || t[i - 1] == ' ' || t[i - 1] == '\t')) {
      t[i] = '\0';
      len = i;
      break;
    }
  }
  while (len && (t[len - 1] == ' ' || t[len - 1] == '\t')) t[--len] = '\0';
  while (*t == ' ' || *t == '\t') t++, len--;
  if (len == 0) return;
  if (len >= 4 && strncasecmp(t, "rule", 4) == 0 && (t[4] == ' ' || t[4] == '\t' || t[4] == '\0')) {
    r2s_rule_t r;
    char why[256];
    if (!r2s__rule_parse(t + 4, len - 4, line, cf->resolve ? cf->resolve : r2s__passwd_uid, &r, why,
                         sizeof why)) {
      bad_line(cf, line, why);
    } else if (!r2s__rules_add(cf->rules, &r)) {
      snprintf(msg, sizeof msg, "more than %d rules: this one is ignored", R2S_RULES_MAX);
      bad_line(cf, line, msg);
    }
    return;
  }
  option_line(cf, line, t);
}

void r2s__conf_parse(r2s_conf_t *cf, const char *text, size_t len)
{
  char buf[R2S_CONF_LINE_MAX + 1];
  unsigned line = 0;
  if (cf->rules && !cf->rules->file[0] && cf->file)
    snprintf(cf->rules->file, sizeof cf->rules->file, "%s", cf->file);
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
    line++;
    if (n > R2S_CONF_LINE_MAX) {
      char msg[64];
      snprintf(msg, sizeof msg, "longer than %d bytes", R2S_CONF_LINE_MAX);
      bad_line(cf, line, msg);
    } else {
      memcpy(buf, text + at, n);
      buf[n] = '\0';
      one_line(cf, line, buf, n);
    }
    at += n + (nl ? 1 : 0);
  }
}

/* Reads all of fd into buf (at most cap bytes); the length, or -errno. */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
  size_t len = 0;
  while (len < cap) {
    ssize_t n = r2s__libc.read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    len += (size_t)n;
  }
  return (ssize_t)len;
}

int r2s__conf_load(r2s_conf_t *cf, const char *path, bool explicit)
{
  /* One more byte than allowed: a file that fills it is too large. */
  static char text[R2S_CONF_MAX_BYTES + 1];
  char msg[160];
  cf->file = path;
  if (cf->rules) snprintf(cf->rules->file, sizeof cf->rules->file, "%s", path);
  int fd = r2s__open_raw(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) {
    int err = errno;
    if (err != ENOENT || explicit) {
      snprintf(msg, sizeof msg, "cannot open it (%s); no option or rule of it applies", strerror(err));
      if (cf->warn) cf->warn(cf->arg, path, 0, msg);
    }
    return -err;
  }
  struct stat sb;
  ssize_t len = -EINVAL;
  if (r2s__fstat_raw(fd, &sb) != 0) {
    len = -errno;
    snprintf(msg, sizeof msg, "cannot stat it (%s); no option or rule of it applies", strerror(errno));
  } else if (!S_ISREG(sb.st_mode)) {
    snprintf(msg, sizeof msg, "not a regular file; no option or rule of it applies");
  } else if ((uint64_t)sb.st_size > R2S_CONF_MAX_BYTES) {
    len = -EFBIG;
    snprintf(msg, sizeof msg, "larger than %u KiB (%lld bytes); no option or rule of it applies",
             R2S_CONF_MAX_BYTES >> 10, (long long)sb.st_size);
  } else if ((len = read_all(fd, text, sizeof text)) < 0) {
    snprintf(msg, sizeof msg, "cannot read it (%s); no option or rule of it applies", strerror((int)-len));
  } else if ((size_t)len > R2S_CONF_MAX_BYTES) { /* it grew since fstat */
    len = -EFBIG;
    snprintf(msg, sizeof msg, "larger than %u KiB; no option or rule of it applies",
             R2S_CONF_MAX_BYTES >> 10);
  }
  r2s__libc.close(fd);
  if (len < 0) {
    if (cf->warn) cf->warn(cf->arg, path, 0, msg);
    return (int)len;
  }
  r2s__conf_parse(cf, text, (size_t)len);
  return 0;
}

/* Whether line (n bytes) of /etc/passwd is name's; then *uid is its uid. */
static bool passwd_entry(const char *line, size_t n, const char *name, uint32_t *uid)
{
  size_t nl = strlen(name);
  if (n <= nl || memcmp(line, name, nl) != 0 || line[nl] != ':') return false;
  const char *p = memchr(line + nl + 1, ':', n - nl - 1); /* past the password field */
  if (!p) return false;
  uint64_t v = 0;
  size_t digits = 0;
  for (p++; p < line + n && isdigit((unsigned char)*p) && digits < 11; p++, digits++)
    v = v * 10 + (uint64_t)(*p - '0');
  if (digits == 0 || p == line + n || *p != ':' || v >= UINT32_MAX) return false;
  *uid = (uint32_t)v;
  return true;
}

int r2s__passwd_uid(const char *name, uint32_t *uid)
{
  /* Lines are read through a small window: a longer one than fits is
   * skipped (no name of ours is that long). */
  char buf[4096];
  int fd = r2s__open_raw("/etc/passwd", O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) return -ENOENT;
  size_t have = 0;
  bool skipping = false, found = false;
  for (;;) {
    ssize_t n = r2s__libc.read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
    size_t at = 0;
    for (;;) {
      char *nl = memchr(buf + at, '\n', have - at);
      if (!nl) break;
      size_t len = (size_t)(nl - (buf + at));
      if (!skipping && passwd_entry(buf + at, len, name, uid)) found = true;
      skipping = false;
      at += len + 1;
      if (found) break;
    }
    if (found) break;
    memmove(buf, buf + at, have - at);
    have -= at;
    if (have == sizeof buf) {
      have = 0;
      skipping = true;
    }
  }
  /* The last line may lack its newline. */
  if (!found && !skipping && have) found = passwd_entry(buf, have, name, uid);
  r2s__libc.close(fd);
  return found ? 0 : -ENOENT;
}

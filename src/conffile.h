/*
 * conffile.h - the rules file: option defaults and ordered per-connection
 * rules, read once at start-up from /etc/r2sock.conf or the file that
 * R2SOCK_CONFIG names (README, "Rules file").
 *
 * Contract:
 *  - The text is lines ending in \n (a \r before it is dropped). Blank lines
 *    and comments are skipped: a `#` at the start of a line or after a
 *    blank or tab starts one. `NAME = value` sets option NAME (any case,
 *    without R2SOCK_) exactly as R2SOCK_NAME=value would; the last such
 *    line of a name wins. `rule KEY=VALUE...` appends a rule (rules.h), in
 *    file order.
 *  - A bad line (unknown name, bad value, bad rule, longer than
 *    R2S_CONF_LINE_MAX bytes, a NUL byte, more than R2S_RULES_MAX rules)
 *    gets exactly one call of warn, with its number and what is wrong, and
 *    has no effect; every other line still applies.
 *  - Option lines for options in locked (those the environment set) are
 *    checked but not applied: the environment wins over the file.
 *  - r2s__conf_parse reads only text[0, len), accepts any bytes, and
 *    allocates nothing but the copies string options keep.
 *  - r2s__conf_load reads the file with the shim's raw calls (r2s__open_raw,
 *    r2s__libc): a regular file of at most R2S_CONF_MAX_BYTES, opened
 *    without blocking, so a FIFO or a device is refused rather than waited
 *    on. A missing file that the user did not name is silent; any other
 *    failure is one warn with line 0, and nothing of the file applies.
 *    Start-up only: it uses one static buffer.
 */
#ifndef R2S_CONFFILE_H
#define R2S_CONFFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "rules.h"

#define R2S_CONF_DEFAULT   "/etc/r2sock.conf"
#define R2S_CONF_MAX_BYTES (64u << 10)
#define R2S_CONF_LINE_MAX  1024

typedef struct r2s_conf_s {
  /* in */
  const char *file;             /* its name, for messages */
  r2s_options_t *opt;           /* option lines set these */
  const bool *locked;           /* R2S_OPT_COUNT flags, or NULL */
  r2s_rules_t *rules;           /* rule lines are appended here */
  r2s_user_resolver_t *resolve; /* user names in rules; NULL: r2s__passwd_uid */
  r2s_conf_warn_t *warn;
  void *arg;
  /* out */
  bool set[R2S_OPT_COUNT]; /* set (or, if locked, checked) by a line */
  unsigned options, bad;   /* good option lines; bad lines */
} r2s_conf_t;

void r2s__conf_parse(r2s_conf_t *cf, const char *text, size_t len);

/* Reads path and parses it (cf->file is set to path). explicit: the user
 * named the file, so a missing one is worth a warning. Returns 0, or
 * -errno when the file could not be read. */
int r2s__conf_load(r2s_conf_t *cf, const char *path, bool explicit);

/* The uid of the user called name in /etc/passwd, read with raw calls:
 * 0, or -ENOENT. The shim must not load NSS modules (they may open
 * sockets from inside its start-up), so users known only to a directory
 * service (LDAP, sssd) are not found; their uids still work. */
int r2s__passwd_uid(const char *name, uint32_t *uid);

#endif

/* The R2SOCK_* options: typed parsing of one table, read once at init. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fcntl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "conffile.h"
#include "libc.h"
#include "log.h"
#include "rules.h"

r2s_options_t r2s__opt = {
#define R2S_OPT_DEFAULT(NAME, field, type, def, doc) .field = def,
    R2S_OPTIONS(R2S_OPT_DEFAULT)
#undef R2S_OPT_DEFAULT
};

bool r2s__parse_bool(const char *s, bool *out)
{
  static const char *const yes[] = {"1", "y", "yes", "on", "true"};
  static const char *const no[] = {"0", "n", "no", "off", "false"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(s, yes[i]) == 0) return *out = true, true;
    if (strcasecmp(s, no[i]) == 0) return *out = false, true;
  }
  return false;
}

bool r2s__parse_size(const char *s, uint64_t *out)
{
  if (!isdigit((unsigned char)s[0])) return false; /* strtoull would take "-1" */
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return false;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    shift = 10;
    break;
  case 'M':
    shift = 20;
    break;
  case 'G':
    shift = 30;
    break;
  case '\0':
    break;
  default:
    return false;
  }
  if (shift) {
    end++;
    if (toupper((unsigned char)*end) == 'I') end++; /* KiB, MiB, GiB */
    if (toupper((unsigned char)*end) == 'B') end++;
  }
  if (*end != '\0') return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = (uint64_t)v << shift;
  return true;
}

bool r2s__parse_level(const char *s, int *out)
{
  static const char *const names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(s, names[i]) == 0) return *out = i, true;
  }
  if (strcasecmp(s, "warning") == 0) return *out = R2S_LOG_WARN, true;
  if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') return *out = s[0] - '0', true;
  return false;
}

bool r2s__parse_upgrade(const char *s, r2s_opt_upgrade_t *out)
{
  uint64_t n;
  if (strcasecmp(s, "never") == 0) {
    *out = (r2s_opt_upgrade_t){R2S_UPGRADE_NEVER, 0};
  } else if (strcasecmp(s, "now") == 0) {
    *out = (r2s_opt_upgrade_t){R2S_UPGRADE_NOW, 0};
  } else if (strcasecmp(s, "auto") == 0) {
    *out = (r2s_opt_upgrade_t){R2S_UPGRADE_AUTO, R2S_UPGRADE_AUTO_BYTES};
  } else if (r2s__parse_size(s, &n)) {
    *out = n ? (r2s_opt_upgrade_t){R2S_UPGRADE_AFTER, n} : (r2s_opt_upgrade_t){R2S_UPGRADE_NOW, 0};
  } else {
    return false;
  }
  return true;
}

bool r2s__parse_ringsize(const char *s, uint64_t *out)
{
  uint64_t v;
  if (strcmp(s, "auto") == 0) {
    *out = 0;
    return true;
  }
  if (!r2s__parse_size(s, &v) || v < 4096 || v > (1ull << 30) || (v & (v - 1))) return false;
  *out = v;
  return true;
}

/* auto (0), or a size of at least 4K (a page: nothing smaller is ever
 * registered). */
bool r2s__parse_memsize(const char *s, uint64_t *out)
{
  uint64_t v;
  if (strcmp(s, "auto") == 0) {
    *out = 0;
    return true;
  }
  if (!r2s__parse_size(s, &v) || v < 4096) return false;
  *out = v;
  return true;
}

bool r2s__parse_usec(const char *s, unsigned *out)
{
  uint64_t v;
  if (!r2s__parse_size(s, &v) || v > 100000 || strpbrk(s, "kKmMgG")) return false;
  *out = (unsigned)v;
  return true;
}

bool r2s__parse_seconds(const char *s, unsigned *out)
{
  uint64_t v;
  if (!r2s__parse_size(s, &v) || v > 3600 || strpbrk(s, "kKmMgG")) return false;
  *out = (unsigned)v;
  return true;
}

static const char *const transport_names[] = {"auto", "shm", "rdma"};

bool r2s__parse_transport(const char *s, r2s_opt_transport_t *out)
{
  for (int i = 0; i < 3; i++)
    if (strcasecmp(s, transport_names[i]) == 0) return *out = (r2s_opt_transport_t)i, true;
  return false;
}

bool r2s__parse_gidindex(const char *s, int *out)
{
  uint64_t v;
  if (!r2s__parse_size(s, &v) || v > 65535 || strpbrk(s, "kKmMgG")) return false;
  *out = (int)v;
  return true;
}

bool r2s__parse_ports(const char *s, r2s_opt_ports_t *out)
{
  r2s_opt_ports_t v = {0};
  if (strcasecmp(s, "none") == 0) return *out = v, true;
  const char *p = s;
  for (;;) {
    char *end;
    if (!isdigit((unsigned char)*p)) return false;
    unsigned long lo = strtoul(p, &end, 10), hi = lo;
    if (*end == '-') {
      p = end + 1;
      if (!isdigit((unsigned char)*p)) return false;
      hi = strtoul(p, &end, 10);
    }
    if (lo == 0 || hi > 65535 || lo > hi || v.n == R2S_PORTS_MAX) return false;
    v.r[v.n].lo = (uint16_t)lo;
    v.r[v.n].hi = (uint16_t)hi;
    v.n++;
    if (*end == '\0') break;
    if (*end != ',') return false;
    p = end + 1;
  }
  *out = v;
  return true;
}

bool r2s__ports_has(const r2s_opt_ports_t *p, unsigned port)
{
  for (unsigned i = 0; i < p->n; i++)
    if (port >= p->r[i].lo && port <= p->r[i].hi) return true;
  return false;
}

const char *r2s__format_ports(const r2s_opt_ports_t *v, char *buf, size_t len)
{
  size_t n = 0;
  if (len) buf[0] = '\0';
  if (v->n == 0) snprintf(buf, len, "none");
  for (unsigned i = 0; i < v->n && n < len; i++) {
    const char *sep = i ? "," : "";
    if (v->r[i].lo == v->r[i].hi)
      n += (size_t)snprintf(buf + n, len - n, "%s%u", sep, v->r[i].lo);
    else
      n += (size_t)snprintf(buf + n, len - n, "%s%u-%u", sep, v->r[i].lo, v->r[i].hi);
  }
  return buf;
}

bool r2s__parse_programs(const char *s, r2s_opt_programs_t *out)
{
  r2s_opt_programs_t v = {0};
  if (strcasecmp(s, "none") == 0) return *out = v, true;
  for (const char *p = s;;) {
    size_t len = strcspn(p, ",");
    if (len == 0 || len >= R2S_PROGRAM_NAME_MAX || v.n == R2S_PROGRAMS_MAX) return false;
    /* One file name: no '/', and no blanks or control bytes, so that the
     * list prints back as it was written. */
    for (size_t i = 0; i < len; i++)
      if (p[i] == '/' || !isgraph((unsigned char)p[i])) return false;
    memcpy(v.name[v.n++], p, len);
    if (p[len] == '\0') break;
    p += len + 1;
  }
  *out = v;
  return true;
}

bool r2s__programs_has(const r2s_opt_programs_t *p, const char *name)
{
  for (unsigned i = 0; i < p->n; i++)
    if (strcmp(p->name[i], name) == 0) return true;
  return false;
}

const char *r2s__format_programs(const r2s_opt_programs_t *v, char *buf, size_t len)
{
  size_t n = 0;
  if (len) buf[0] = '\0';
  if (v->n == 0) snprintf(buf, len, "none");
  for (unsigned i = 0; i < v->n && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : "", v->name[i]);
  return buf;
}

const char *r2s__format_upgrade(const r2s_opt_upgrade_t *v, char *buf, size_t len)
{
  if (v->mode == R2S_UPGRADE_NEVER)
    snprintf(buf, len, "never");
  else if (v->mode == R2S_UPGRADE_NOW)
    snprintf(buf, len, "now");
  else if (v->mode == R2S_UPGRADE_AUTO)
    snprintf(buf, len, "auto");
  else
    snprintf(buf, len, "after %" PRIu64 " bytes", v->after_bytes);
  return buf;
}

/* A copy: redis and nginx overwrite their environment strings to set the
 * process title, long before the shim reads its options again. It
 * replaces the copy an earlier line of the rules file made. */
static bool keep_copy(const char *s, const char **out)
{
  char *copy = strdup(s);
  if (!copy) return false;
  free((void *)*out);
  *out = copy;
  return true;
}

static bool parse_string(const char *s, const char **out)
{
  return s[0] != '\0' && keep_copy(s, out);
}

/* Any string, the empty one too (it means "none"). */
static bool parse_path(const char *s, const char **out)
{
  return keep_copy(s, out);
}

/* Adapters with one name per option type, so the table can dispatch on it. */
#define parse_bool     r2s__parse_bool
#define parse_level    r2s__parse_level
#define parse_upgrade  r2s__parse_upgrade
#define parse_ringsize r2s__parse_ringsize
#define parse_usec     r2s__parse_usec
#define parse_memsize  r2s__parse_memsize
static bool parse_bytes(const char *s, uint64_t *out)
{
  return r2s__parse_size(s, out);
}
#define parse_seconds  r2s__parse_seconds
#define parse_transport r2s__parse_transport
#define parse_gidindex r2s__parse_gidindex
#define parse_ports    r2s__parse_ports
#define format_ports   r2s__format_ports
#define parse_programs r2s__parse_programs
#define format_programs r2s__format_programs

static const char *format_bool(const bool *v, char *b, size_t n)
{
  snprintf(b, n, "%d", *v);
  return b;
}
static const char *format_ringsize(const uint64_t *v, char *b, size_t n)
{
  if (*v == 0)
    snprintf(b, n, "auto");
  else
    snprintf(b, n, "%llu", (unsigned long long)*v);
  return b;
}
#define format_memsize format_ringsize
static const char *format_bytes(const uint64_t *v, char *b, size_t n)
{
  snprintf(b, n, "%llu", (unsigned long long)*v);
  return b;
}
static const char *format_usec(const unsigned *v, char *b, size_t n)
{
  snprintf(b, n, "%u", *v);
  return b;
}
static const char *format_seconds(const unsigned *v, char *b, size_t n)
{
  if (*v == 0)
    snprintf(b, n, "tcp_fin_timeout");
  else
    snprintf(b, n, "%u", *v);
  return b;
}
static const char *format_level(const int *v, char *b, size_t n)
{
  snprintf(b, n, "%d", *v);
  return b;
}
static const char *format_string(const char *const *v, char *b, size_t n)
{
  snprintf(b, n, "%s", *v ? *v : "(unset)");
  return b;
}
/* Only CONFIG is a path, so its default is the rules file's. */
static const char *format_path(const char *const *v, char *b, size_t n)
{
  snprintf(b, n, "%s", !*v ? R2S_CONF_DEFAULT : **v ? *v : "none");
  return b;
}
#define format_upgrade r2s__format_upgrade
#define format_transport r2s__format_transport
const char *r2s__format_transport(const r2s_opt_transport_t *v, char *b, size_t n)
{
  snprintf(b, n, "%s", (unsigned)*v < 3 ? transport_names[*v] : "?");
  return b;
}
static const char *format_gidindex(const int *v, char *b, size_t n)
{
  if (*v < 0)
    snprintf(b, n, "auto");
  else
    snprintf(b, n, "%d", *v);
  return b;
}

static const char *const accepted_level = "error, warn, info, debug or 0-3";
static const char *const accepted_bool = "1/0, yes/no, on/off, true/false";
static const char *const accepted_string = "a non-empty string";
static const char *const accepted_path = "a file name, or nothing for none";
static const char *const accepted_upgrade = "never, now, auto or a size such as 64K";
static const char *const accepted_ringsize = "auto, or a power of two from 4K to 1G";
static const char *const accepted_bytes = "a size such as 256K, or 0";
static const char *const accepted_memsize = "auto, or a size such as 256M (at least 4K)";
static const char *const accepted_usec = "a whole number of microseconds, 0 to 100000";
static const char *const accepted_seconds = "a whole number of seconds, 0 to 3600";
static const char *const accepted_transport = "auto, shm or rdma";
static const char *const accepted_gidindex = "a GID table index, 0 to 65535";
static const char *const accepted_ports = "none, or up to 16 ports and ranges such as 21,23,512-514";
static const char *const accepted_programs = "none, or up to 8 file names (no '/', under 32 bytes) such as rsync,app";

/* True if name (after "R2SOCK_", up to '=') is in the table. */
static bool known_name(const char *name, size_t len)
{
#define R2S_OPT_KNOWN(NAME, field, type, def, doc)                                                           \
  if (len == sizeof(#NAME) - 1 && memcmp(name, #NAME, len) == 0) return true;
  R2S_OPTIONS(R2S_OPT_KNOWN)
#undef R2S_OPT_KNOWN
  return false;
}

extern char **environ;

/* The environment the process started with. When the first call into the
 * shim comes very early (an executable's preinit_array, a library with
 * DF_1_INITFIRST), libc has not set environ yet; the kernel's copy in
 * /proc/self/environ is the same strings, so they are read from there. */
static char **startup_environment(void)
{
  static char buf[64 << 10];
  static char *vec[512];
  if (environ && environ[0]) return environ;
  int fd = r2s__open_raw("/proc/self/environ", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return NULL;
  size_t len = 0;
  ssize_t n;
  while (len < sizeof buf - 1 && (n = r2s__libc.read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)n;
  r2s__libc.close(fd);
  buf[len] = '\0';
  size_t k = 0;
  for (size_t off = 0; off < len && k < sizeof vec / sizeof vec[0] - 1; off += strlen(buf + off) + 1)
    vec[k++] = buf + off;
  vec[k] = NULL;
  return vec;
}

static const char *env_get(char **env, const char *name)
{
  size_t len = strlen(name);
  for (; env && *env; env++)
    if (strncmp(*env, name, len) == 0 && (*env)[len] == '=') return *env + len + 1;
  return NULL;
}

int r2s__option_find(const char *name, size_t len)
{
#define R2S_OPT_FIND(NAME, field, type, def, doc)                                                            \
  if (len == sizeof(#NAME) - 1 && strncasecmp(name, #NAME, len) == 0) return R2S_OPT_##NAME;
  R2S_OPTIONS(R2S_OPT_FIND)
#undef R2S_OPT_FIND
  return -1;
}

const char *r2s__option_name(int id)
{
  static const char *const names[] = {
#define R2S_OPT_NAME(NAME, field, type, def, doc) #NAME,
      R2S_OPTIONS(R2S_OPT_NAME)
#undef R2S_OPT_NAME
  };
  return id >= 0 && id < R2S_OPT_COUNT ? names[id] : "?";
}

bool r2s__option_parse(r2s_options_t *o, int id, const char *value, const char **accepted)
{
  switch (id) {
#define R2S_OPT_PARSE(NAME, field, type, def, doc)                                                           \
  case R2S_OPT_##NAME:                                                                                       \
    *accepted = accepted_##type;                                                                             \
    return parse_##type(value, &o->field);
    R2S_OPTIONS(R2S_OPT_PARSE)
#undef R2S_OPT_PARSE
  }
  *accepted = "an option";
  return false;
}

/* What r2s__options_release does to a field of each type: strings are
 * the only ones that own memory. */
#define release_string(p)                                                                                    \
  do {                                                                                                       \
    free((void *)*(p));                                                                                      \
    *(p) = NULL;                                                                                             \
  } while (0)
#define release_path(p) release_string(p)
#define release_level(p)
#define release_bool(p)
#define release_upgrade(p)
#define release_ports(p)
#define release_programs(p)
#define release_ringsize(p)
#define release_bytes(p)
#define release_memsize(p)
#define release_usec(p)
#define release_seconds(p)
#define release_transport(p)
#define release_gidindex(p)

void r2s__options_release(r2s_options_t *o)
{
#define R2S_OPT_RELEASE(NAME, field, type, def, doc) release_##type(&o->field);
  R2S_OPTIONS(R2S_OPT_RELEASE)
#undef R2S_OPT_RELEASE
}

/* The rules file's warnings in the log. Every process the shim is loaded
 * into reads the file, so a file of many bad lines would fill each one's
 * stderr: past the first few, they are counted and summed up once. */
#define CONF_WARNINGS_SHOWN 8
typedef struct conf_log_s {
  unsigned shown, hidden;
} conf_log_t;

static void conf_warn(void *arg, const char *file, unsigned line, const char *msg)
{
  conf_log_t *cl = arg;
  if (line == 0) {
    r2s__warn("rules file %s: %s", file, msg);
  } else if (cl->shown < CONF_WARNINGS_SHOWN) {
    cl->shown++;
    r2s__warn("%s:%u: %s; line ignored", file, line, msg);
  } else {
    cl->hidden++;
  }
}

/* The rules file, after the environment: its lines set what the
 * environment left alone (origin "file"). Messages go to warn, or with
 * none to the log. Returns as r2s__options_load_checked. */
static int load_rules_file(const bool *from_env, const char **origin, r2s_conf_warn_t *warn, void *arg,
                           const char **file)
{
  static r2s_conf_t cf; /* static: it holds a flag per option, and start-up runs once */
  memset(&r2s__rules, 0, sizeof r2s__rules);
  *file = NULL;
  const char *path = r2s__opt.config;
  bool explicit = path != NULL;
  /* A set-user-ID program keeps the system's file: a user's own file
   * would change how a program of another user's works, and its bad
   * lines would be quoted to the user in the warnings. */
  if (explicit && getauxval(AT_SECURE)) {
    r2s__warn("R2SOCK_CONFIG is ignored in a set-user-ID or set-group-ID program; reading %s",
              R2S_CONF_DEFAULT);
    path = NULL;
    explicit = false;
  }
  if (!path) path = R2S_CONF_DEFAULT;
  if (path[0] == '\0') return 0; /* R2SOCK_CONFIG= : no file */
  conf_log_t cl = {0, 0};
  memset(&cf, 0, sizeof cf);
  cf.opt = &r2s__opt;
  cf.locked = from_env;
  cf.rules = &r2s__rules;
  cf.warn = warn ? warn : conf_warn;
  cf.arg = warn ? arg : &cl;
  int rc = r2s__conf_load(&cf, path, explicit);
  if (rc == -ENOENT && !explicit) return 0;
  *file = path;
  if (rc < 0) return rc;
  if (cl.hidden)
    r2s__warn("%s: %u more bad lines, also ignored (r2sock-run --check lists them all)", path, cl.hidden);
  for (int i = 0; i < R2S_OPT_COUNT; i++)
    if (cf.set[i] && !from_env[i]) origin[i] = "file";
  r2s__info("rules file %s: %u option lines, %u rules, %u bad lines", path, cf.options, r2s__rules.n, cf.bad);
  return (int)cf.bad;
}

void r2s__options_load(void)
{
  const char *file;
  (void)r2s__options_load_checked(NULL, NULL, &file);
}

int r2s__options_load_checked(r2s_conf_warn_t *warn, void *arg, const char **file)
{
  const char *origin[R2S_OPT_COUNT];
  bool from_env[R2S_OPT_COUNT];
  int i = 0;
  const char *v;
  char **env = startup_environment();
#define R2S_OPT_READ(NAME, field, type, def, doc)                                                            \
  origin[i] = "default";                                                                                     \
  from_env[i] = false;                                                                                       \
  if ((v = env_get(env, "R2SOCK_" #NAME)) != NULL) {                                                         \
    if (parse_##type(v, &r2s__opt.field))                                                                    \
      origin[i] = "environment", from_env[i] = true;                                                         \
    else                                                                                                     \
      r2s__warn("R2SOCK_" #NAME "=%s is not valid (expected %s); keeping the default", v, accepted_##type);  \
  }                                                                                                          \
  i++;
  R2S_OPTIONS(R2S_OPT_READ)
#undef R2S_OPT_READ

  /* The environment's level governs the file's warnings too. */
  r2s__log_level = r2s__opt.verbose && r2s__opt.log_level < R2S_LOG_INFO ? R2S_LOG_INFO : r2s__opt.log_level;
  int rc = load_rules_file(from_env, origin, warn, arg, file);
  /* R2SOCK_UPGRADE=never in the environment is the switch that makes the
   * shim a pass-through (README, troubleshooting): no rule overrides it. */
  if (from_env[R2S_OPT_UPGRADE] && r2s__opt.upgrade.mode == R2S_UPGRADE_NEVER && r2s__rules.n) {
    r2s__info("R2SOCK_UPGRADE=never: the %u rules of %s do not apply", r2s__rules.n, r2s__rules.file);
    r2s__rules.overridden = r2s__rules.n;
    r2s__rules.n = 0;
    r2s__rules.keys = 0;
    r2s__rules.may_upgrade = false;
  }
  if (r2s__opt.stats_file) r2s__opt.stats = true;
  if (r2s__opt.verbose && r2s__opt.log_level < R2S_LOG_INFO) r2s__opt.log_level = R2S_LOG_INFO;
  r2s__log_level = r2s__opt.log_level;

  for (char **e = env; e && *e; e++) {
    if (strncmp(*e, "R2SOCK_", 7) != 0) continue;
    const char *name = *e + 7, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    /* Info, not a warning: test harnesses and launchers keep their own
     * R2SOCK_* variables (R2SOCK_LIB, ...) in the environment of the app. */
    if (!known_name(name, len)) r2s__info("%.*s is not an option; ignored", (int)(len + 7), *e);
  }

  if (r2s__opt.verbose) {
    char buf[256];
    i = 0;
#define R2S_OPT_PRINT(NAME, field, type, def, doc)                                                           \
  r2s__info("option R2SOCK_%-11s = %-12s (%s)  %s", #NAME, format_##type(&r2s__opt.field, buf, sizeof buf),  \
            origin[i], doc);                                                                                 \
  i++;
    R2S_OPTIONS(R2S_OPT_PRINT)
#undef R2S_OPT_PRINT
    for (uint32_t k = 0; k < r2s__rules.n; k++)
      r2s__info("rule %s:%u: %s", r2s__rules.file, r2s__rules.rule[k].line,
                r2s__rule_format(&r2s__rules.rule[k], buf, sizeof buf));
  }
  return rc;
}

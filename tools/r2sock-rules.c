/*
 * r2sock-rules - what `r2sock-run --check` runs to check the rules file
 * and to explain what it decides for a connection. Installed next to the
 * library (not on PATH); scripts/r2sock-check calls it.
 *
 *   r2sock-rules check
 *   r2sock-rules explain PROGRAM PORT [--lport N] [--peer ADDR] [--user U]
 *
 * It reads the options and the rules file exactly as the library does in a
 * process (the same sources: src/options.c, conffile.c, rules.c), with the
 * environment it is given, and matches with the library's own matcher.
 * Every message about the file is printed, "FILE:LINE: what is wrong",
 * none left out. The connection is seen from the program that connects
 * to PORT (the service port of R2SOCK_SKIP_PORTS).
 *
 * Exit status: 0 the file (if any) has no bad line; 1 it has some, or
 * cannot be read; 2 usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conffile.h"
#include "libc.h"
#include "options.h"
#include "rules.h"

/* log.c asks whether the process confined its system calls (sandbox.h);
 * this program never does, and it does not link the rest of the shim. */
int r2s__sandbox_on;

static void usage(FILE *f)
{
  fprintf(f, "usage: r2sock-rules check\n"
             "       r2sock-rules explain PROGRAM PORT [--lport N] [--peer ADDR] [--user NAME|UID]\n");
}

static void print_warning(void *arg, const char *file, unsigned line, const char *msg)
{
  (void)arg;
  if (line)
    printf("%s:%u: %s\n", file, line, msg);
  else
    printf("%s: %s\n", file, msg);
}

static bool parse_port(const char *s, unsigned *port)
{
  r2s_opt_ports_t p;
  if (!r2s__parse_ports(s, &p) || p.n != 1 || p.r[0].lo != p.r[0].hi) return false;
  *port = p.r[0].lo;
  return true;
}

static void policy_text(const r2s_policy_t *p, char *buf, size_t len)
{
  char u[64], t[16];
  const r2s_opt_upgrade_t *up = &p->upgrade;
  if (up->mode == R2S_UPGRADE_AFTER)
    snprintf(u, sizeof u, "%" PRIu64, up->after_bytes);
  else
    r2s__format_upgrade(up, u, sizeof u);
  snprintf(buf, len, "upgrade=%s transport=%s", u, r2s__format_transport(&p->transport, t, sizeof t));
}

static int explain(int argc, char **argv, int bad, const char *file)
{
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  r2s_rule_conn_t c;
  memset(&c, 0, sizeof c);
  /* A path stands for the file it leads to, as /proc/self/exe would. */
  char real[PATH_MAX];
  const char *program = argv[0];
  if (strchr(program, '/')) {
    if (!realpath(program, real)) {
      fprintf(stderr, "r2sock-rules: %s: %s\n", program, strerror(errno));
      return 2;
    }
    program = strrchr(real, '/') + 1;
  }
  c.program = program;
  if (!parse_port(argv[1], &c.port)) {
    fprintf(stderr, "r2sock-rules: PORT must be one port, 1-65535, not '%s'\n", argv[1]);
    return 2;
  }
  c.uid_known = true;
  c.uid = (uint32_t)geteuid();
  for (int i = 2; i < argc; i++) {
    const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!val) {
      fprintf(stderr, "r2sock-rules: %s needs a value\n", opt);
      return 2;
    }
    i++;
    if (strcmp(opt, "--lport") == 0) {
      if (!parse_port(val, &c.lport)) {
        fprintf(stderr, "r2sock-rules: --lport must be one port, 1-65535, not '%s'\n", val);
        return 2;
      }
    } else if (strcmp(opt, "--peer") == 0) {
      struct sockaddr_storage ss;
      memset(&ss, 0, sizeof ss);
      if (inet_pton(AF_INET, val, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
        ss.ss_family = AF_INET;
      else if (inet_pton(AF_INET6, val, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1)
        ss.ss_family = AF_INET6;
      else {
        fprintf(stderr, "r2sock-rules: --peer must be an IPv4 or IPv6 address, not '%s'\n", val);
        return 2;
      }
      r2s__rule_conn_peer(&c, (const struct sockaddr *)&ss);
    } else if (strcmp(opt, "--user") == 0) {
      char *end;
      unsigned long v = strtoul(val, &end, 10);
      if (val[0] >= '0' && val[0] <= '9' && *end == '\0' && v < UINT32_MAX) {
        c.uid = (uint32_t)v;
      } else if (r2s__passwd_uid(val, &c.uid) != 0) {
        fprintf(stderr, "r2sock-rules: no user named '%s' in /etc/passwd\n", val);
        return 2;
      }
    } else {
      fprintf(stderr, "r2sock-rules: unknown option %s\n", opt);
      usage(stderr);
      return 2;
    }
  }

  char peer[INET6_ADDRSTRLEN] = "unknown", lport[16] = "unknown";
  if (c.family) inet_ntop(c.family, c.addr, peer, sizeof peer);
  if (c.lport) snprintf(lport, sizeof lport, "%u", c.lport);
  printf("connection: program %s, port %u, local port %s, peer %s, user %" PRIu32 "\n", c.program, c.port,
         lport, peer, c.uid);

  r2s_policy_t p = r2s__policy_default();
  char text[512], how[128];
  if (r2s__rules.overridden) {
    printf("rule: not consulted\n");
    printf("decision: tcp (R2SOCK_UPGRADE=never in the environment: the shim is a pass-through)\n");
    return bad ? 1 : 0;
  }
  /* The skip lists first, as in the library (conn.c, start_link). */
  if (r2s__programs_has(&r2s__opt.skip_programs, c.program) || r2s__ports_has(&r2s__opt.skip_ports, c.port)) {
    bool by_program = r2s__programs_has(&r2s__opt.skip_programs, c.program);
    printf("rule: not consulted (the skip lists apply first)\n");
    printf("decision: tcp (R2SOCK_SKIP_%s lists %s)\n", by_program ? "PROGRAMS" : "PORTS",
           by_program ? c.program : argv[1]);
    return bad ? 1 : 0;
  }
  for (uint32_t i = 0; i < r2s__rules.n; i++) {
    const r2s_rule_t *r = &r2s__rules.rule[i];
    r2s_rule_verdict_t v = r2s__rule_match(r, &c);
    if (v == R2S_RULE_YES) break;
    if (v == R2S_RULE_UNKNOWN) {
      /* Only the peer and the local port can be missing here. */
      bool no_peer = (r->keys & R2S_RULE_PEER) && !c.family, lp = (r->keys & R2S_RULE_LPORT) && !c.lport;
      printf("unknown: %s:%" PRIu32 ": rule %s (it needs %s%s%s to decide)\n", file, r->line,
             r2s__rule_format(r, text, sizeof text), no_peer ? "--peer" : "", no_peer && lp ? " and " : "",
             lp ? "--lport" : "");
    }
  }
  const r2s_rule_t *r = r2s__rules_decide(&r2s__rules, &c, &p);
  policy_text(&p, how, sizeof how);
  if (r) {
    printf("rule: %s:%" PRIu32 ": rule %s\n", file, r->line, r2s__rule_format(r, text, sizeof text));
    if (p.upgrade.mode == R2S_UPGRADE_NEVER)
      printf("decision: tcp (the rule at %s:%" PRIu32 " says upgrade=never)\n", file, r->line);
    else
      printf("decision: %s (the rule at %s:%" PRIu32 ")\n", how, file, r->line);
  } else {
    printf("rule: none matches\n");
    if (p.upgrade.mode == R2S_UPGRADE_NEVER)
      printf("decision: tcp (no rule matches, and the default is upgrade=never)\n");
    else
      printf("decision: %s (no rule matches: the defaults)\n", how);
  }
  return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  bool check = strcmp(argv[1], "check") == 0;
  if (!check && strcmp(argv[1], "explain") != 0) {
    usage(stderr);
    return 2;
  }
  if (check && argc != 2) {
    usage(stderr);
    return 2;
  }
  if (r2s__libc_load() != 0) return 2;
  const char *file;
  int bad = r2s__options_load_checked(print_warning, NULL, &file);
  if (!file) {
    const char *named = r2s__opt.config;
    printf("file: none (%s)\n",
           named && !named[0] ? "R2SOCK_CONFIG is empty" : R2S_CONF_DEFAULT " does not exist");
  } else if (bad >= 0) {
    printf("file: %s: %" PRIu32 " rules, %d bad lines\n", file, r2s__rules.n + r2s__rules.overridden, bad);
  } else {
    printf("file: %s: not read\n", file);
  }
  if (check) return bad ? 1 : 0;
  return explain(argc - 2, argv + 2, bad, file ? file : "-");
}

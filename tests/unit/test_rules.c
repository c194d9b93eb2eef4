/* The rules file: the rule parser and its every error, the matcher (port
 * ranges, IPv4 and IPv6 networks, users, first match), the file's lines
 * (comments, options, one warning per bad line), reading it (too large,
 * missing, unreadable, not a regular file), and the environment winning
 * over it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "conffile.h"
#include "libc.h"
#include "log.h"
#include "options.h"
#include "rules.h"

/* The resolver the parser gets here: two users, whatever the host has. */
static int fake_users(const char *name, uint32_t *uid)
{
  if (strcmp(name, "postgres") == 0) return *uid = 120, 0;
  if (strcmp(name, "www-data") == 0) return *uid = 33, 0;
  return -ENOENT;
}

static bool parse(const char *text, r2s_rule_t *r, char *why, size_t whylen)
{
  return r2s__rule_parse(text, strlen(text), 7, fake_users, r, why, whylen);
}

/* A rule that must parse. */
static r2s_rule_t rule(const char *text)
{
  r2s_rule_t r;
  char why[256] = "";
  if (!parse(text, &r, why, sizeof why)) fail_msg("'%s' did not parse: %s", text, why);
  return r;
}

/* A rule that must not parse, with a message that contains want. */
static void refused(const char *text, const char *want)
{
  r2s_rule_t r;
  char why[256] = "";
  if (parse(text, &r, why, sizeof why)) fail_msg("'%s' parsed, expected an error with '%s'", text, want);
  if (!strstr(why, want)) fail_msg("'%s': the error '%s' does not say '%s'", text, why, want);
}

static void test_rule_syntax(void **state)
{
  (void)state;
  r2s_rule_t r = rule(" upgrade=never program=rsync,sshd ");
  assert_int_equal(r.line, 7);
  assert_int_equal(r.keys, R2S_RULE_UPGRADE | R2S_RULE_PROGRAM);
  assert_int_equal(r.policy.upgrade.mode, R2S_UPGRADE_NEVER);
  assert_int_equal(r.programs.n, 2);
  r = rule("\tUPGRADE=1M\tPort=6379 transport=SHM");
  assert_int_equal(r.policy.upgrade.mode, R2S_UPGRADE_AFTER);
  assert_int_equal(r.policy.upgrade.after_bytes, 1u << 20);
  assert_int_equal(r.policy.transport, R2S_TRANSPORT_SHM);
  r = rule("upgrade=auto user=postgres,0,4294967294");
  assert_int_equal(r.nusers, 3);
  assert_int_equal(r.uid[0], 120);
  assert_int_equal(r.uid[2], 4294967294u);
  r = rule("transport=rdma"); /* no match key: every connection */
  assert_int_equal(r.keys, R2S_RULE_TRANSPORT);

  /* Every class of error, each with what it says. */
  refused("", "needs an action");
  refused("program=rsync", "needs an action");
  refused("upgrade=never port", "expected KEY=VALUE, found 'port'");
  refused("upgrade=never =22", "expected KEY=VALUE");
  refused("upgrade=never prog=x", "unknown key 'prog'");
  refused("upgrade=never upgrade=now", "upgrade= given twice");
  refused("upgrade=never port=", "port= has no value");
  refused("upgrade=sometimes", "upgrade=sometimes: expected never, now, auto");
  refused("transport=tcp", "not a transport (upgrade=never keeps connections on TCP)");
  refused("transport=verbs", "transport=verbs: expected auto, shm or rdma");
  refused("upgrade=never program=a/b", "program=a/b: expected up to 8 file names");
  refused("upgrade=never program=none", "program=none");
  refused("upgrade=never program=a,,b", "program=a,,b");
  refused("upgrade=never program=a,b,c,d,e,f,g,h,i", "up to 8");
  refused("upgrade=never program=abcdefghijklmnopqrstuvwxyz0123456", "under 32 bytes");
  refused("upgrade=never port=0", "port=0: expected up to 16 ports");
  refused("upgrade=never port=65536", "port=65536");
  refused("upgrade=never port=9-8", "port=9-8");
  refused("upgrade=never port=none", "port=none");
  refused("upgrade=never port=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "up to 16");
  refused("upgrade=never lport=80x", "lport=80x");
  refused("upgrade=never peer=10.0.0.0/33", "'10.0.0.0/33' is not an IPv4 or IPv6 address");
  refused("upgrade=never peer=1,2.3.4.5", "'1' is not");
  refused("upgrade=never peer=1.2.3.4,a,b,c,d,e,f,g,h", "'a' is not");
  refused("upgrade=never peer=1.1.1.1,1.1.1.2,1.1.1.3,1.1.1.4,1.1.1.5,1.1.1.6,1.1.1.7,1.1.1.8,1.1.1.9",
          "more than 8 addresses");
  refused("upgrade=never user=nobody-here", "no user named 'nobody-here'");
  refused("upgrade=never user=4294967295", "'4294967295' is not a uid");
  refused("upgrade=never user=12ab", "'12ab' is not a uid");
  refused("upgrade=never user=0,,1", "an empty name");
  refused("upgrade=never user=1,2,3,4,5,6,7,8,9", "more than 8 users");
  /* Unprintable bytes are shown as '?', and long ones cut. */
  refused("upgrade=never pr\x01og=x", "unknown key 'pr?og'");
  refused("upgrade=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "xxxxxxxx...");
  /* A NUL in the middle of a token (the file refuses such lines first). */
  r2s_rule_t r2;
  char why[128];
  assert_false(r2s__rule_parse("upgrade=ne\0ver", 14, 1, NULL, &r2, why, sizeof why));
  assert_non_null(strstr(why, "NUL"));
  /* Without a resolver, names are unknown and uids still work. */
  assert_false(r2s__rule_parse("upgrade=now user=postgres", 25, 1, NULL, &r2, why, sizeof why));
  assert_true(r2s__rule_parse("upgrade=now user=120", 20, 1, NULL, &r2, why, sizeof why));
}

static r2s_rule_conn_t conn(const char *program, unsigned port, unsigned lport, const char *peer)
{
  r2s_rule_conn_t c;
  memset(&c, 0, sizeof c);
  c.program = program;
  c.port = port;
  c.lport = lport;
  if (peer) {
    if (inet_pton(AF_INET, peer, c.addr) == 1)
      c.family = AF_INET;
    else if (inet_pton(AF_INET6, peer, c.addr) == 1)
      c.family = AF_INET6;
    else
      fail_msg("bad test address %s", peer);
  }
  return c;
}

static r2s_rule_verdict_t match(const char *text, r2s_rule_conn_t c)
{
  r2s_rule_t r = rule(text);
  return r2s__rule_match(&r, &c);
}

static void test_ports_and_programs(void **state)
{
  (void)state;
  const char *r = "upgrade=never port=22,8000-8100,65535";
  assert_int_equal(match(r, conn("a", 22, 1, NULL)), R2S_RULE_YES);
  assert_int_equal(match(r, conn("a", 21, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match(r, conn("a", 23, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match(r, conn("a", 7999, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match(r, conn("a", 8000, 1, NULL)), R2S_RULE_YES);
  assert_int_equal(match(r, conn("a", 8100, 1, NULL)), R2S_RULE_YES);
  assert_int_equal(match(r, conn("a", 8101, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match(r, conn("a", 65535, 1, NULL)), R2S_RULE_YES);
  assert_int_equal(match(r, conn("a", 0, 1, NULL)), R2S_RULE_UNKNOWN);
  /* port is the peer's, lport ours. */
  assert_int_equal(match("upgrade=now lport=6379", conn("a", 40000, 6379, NULL)), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now lport=6379", conn("a", 6379, 40000, NULL)), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now lport=6379", conn("a", 6379, 0, NULL)), R2S_RULE_UNKNOWN);
  /* Programs: exact file names, case and all. */
  assert_int_equal(match("upgrade=now program=rsync,sshd", conn("sshd", 1, 1, NULL)), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now program=rsync,sshd", conn("SSHD", 1, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now program=rsync", conn("rsync2", 1, 1, NULL)), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now program=rsync", conn(NULL, 1, 1, NULL)), R2S_RULE_UNKNOWN);
  /* Every key must match; one that does not decides at once. */
  assert_int_equal(match("upgrade=now program=a port=1", conn("b", 0, 0, NULL)), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now", conn(NULL, 0, 0, NULL)), R2S_RULE_YES);
  /* Users. */
  r2s_rule_conn_t c = conn("a", 1, 1, NULL);
  assert_int_equal(match("upgrade=now user=postgres,0", c), R2S_RULE_UNKNOWN);
  c.uid_known = true;
  c.uid = 120;
  assert_int_equal(match("upgrade=now user=0,postgres", c), R2S_RULE_YES);
  c.uid = 33;
  assert_int_equal(match("upgrade=now user=0,postgres", c), R2S_RULE_NO);
}

static void test_networks(void **state)
{
  (void)state;
  /* IPv4: prefix edges, /0, /32, host bits cleared. */
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, "10.255.255.255")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, "11.0.0.0")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=10.1.2.3/8", conn("a", 1, 1, "10.9.9.9")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=192.168.1.128/25", conn("a", 1, 1, "192.168.1.127")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=192.168.1.128/25", conn("a", 1, 1, "192.168.1.128")),
                   R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=192.168.1.128/25", conn("a", 1, 1, "192.168.1.255")),
                   R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=1.2.3.4", conn("a", 1, 1, "1.2.3.4")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=1.2.3.4/32", conn("a", 1, 1, "1.2.3.5")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=0.0.0.0/0", conn("a", 1, 1, "255.1.2.3")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=0.0.0.0/0", conn("a", 1, 1, "2001:db8::1")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, NULL)), R2S_RULE_UNKNOWN);
  /* IPv6: /0, /128, a prefix that ends inside a byte. */
  assert_int_equal(match("upgrade=now peer=::/0", conn("a", 1, 1, "fe80::1")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=::/0", conn("a", 1, 1, "10.0.0.1")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=::1", conn("a", 1, 1, "::1")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=::1/128", conn("a", 1, 1, "::2")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=2001:db8::/33", conn("a", 1, 1, "2001:db8:7fff::1")),
                   R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=2001:db8::/33", conn("a", 1, 1, "2001:db8:8000::1")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=fd00::/8", conn("a", 1, 1, "fdff:ffff::1")), R2S_RULE_YES);
  /* An IPv4-mapped peer (a dual-stack socket) is in IPv4 networks and in
   * ::ffff:0:0/96, not in other IPv6 ones. */
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, "::ffff:10.1.2.3")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, "::ffff:11.1.2.3")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=::ffff:0:0/96", conn("a", 1, 1, "::ffff:11.1.2.3")), R2S_RULE_YES);
  assert_int_equal(match("upgrade=now peer=10.0.0.0/8", conn("a", 1, 1, "::10.1.2.3")), R2S_RULE_NO);
  assert_int_equal(match("upgrade=now peer=127.0.0.1,::1", conn("a", 1, 1, "::1")), R2S_RULE_YES);
  /* What is not a network. */
  const char *bad[] = {"10.0.0.0/",   "/8",           "10.0.0.0/-1",  "10.0.0.0/+8",
                       "10.0.0.0/ 8", "10.0.0.0/0x8", "10.0.0.0/8/8", "10.0.0/8",
                       "10.0.0.256",  "::/129",       "[::1]",        "fe80::1%eth0",
                       "::1/1000",    "1.2.3.4.5",    "localhost",    "2001:db8:::1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[128];
    snprintf(text, sizeof text, "upgrade=now peer=%s", bad[i]);
    refused(text, "is not an IPv4 or IPv6 address");
  }
  /* Networks print as networks: host bits cleared, every prefix shown. */
  char buf[256];
  r2s_rule_t r = rule("peer=10.1.2.3/8,::1,2001:db8:1:2:3::/48 upgrade=never");
  assert_string_equal(r2s__rule_format(&r, buf, sizeof buf),
                      "upgrade=never peer=10.0.0.0/8,::1/128,2001:db8:1::/48");
}

static void test_first_match_wins(void **state)
{
  (void)state;
  static r2s_rules_t rs;
  memset(&rs, 0, sizeof rs);
  r2s_rule_t r = rule("upgrade=never port=6379");
  r.line = 3;
  assert_true(r2s__rules_add(&rs, &r));
  r = rule("upgrade=now port=6000-7000 transport=shm");
  r.line = 5;
  assert_true(r2s__rules_add(&rs, &r));
  r = rule("transport=rdma");
  r.line = 9;
  assert_true(r2s__rules_add(&rs, &r));
  assert_int_equal(rs.keys, R2S_RULE_UPGRADE | R2S_RULE_PORT | R2S_RULE_TRANSPORT);
  assert_true(rs.may_upgrade);

  r2s_policy_t def = {{R2S_UPGRADE_AUTO, R2S_UPGRADE_AUTO_BYTES}, R2S_TRANSPORT_AUTO}, p = def;
  r2s_rule_conn_t c = conn("a", 6379, 1, NULL);
  const r2s_rule_t *hit = r2s__rules_decide(&rs, &c, &p);
  assert_non_null(hit);
  assert_int_equal(hit->line, 3); /* the later one matches too, but comes second */
  assert_int_equal(p.upgrade.mode, R2S_UPGRADE_NEVER);
  assert_int_equal(p.transport, R2S_TRANSPORT_AUTO); /* not the rule's: it has no transport= */
  p = def;
  c.port = 6380;
  hit = r2s__rules_decide(&rs, &c, &p);
  assert_int_equal(hit->line, 5);
  assert_int_equal(p.upgrade.mode, R2S_UPGRADE_NOW);
  assert_int_equal(p.transport, R2S_TRANSPORT_SHM);
  p = def;
  c.port = 80;
  hit = r2s__rules_decide(&rs, &c, &p);
  assert_int_equal(hit->line, 9);
  assert_int_equal(p.upgrade.mode, R2S_UPGRADE_AUTO); /* the default's */
  assert_int_equal(p.transport, R2S_TRANSPORT_RDMA);
  /* No rule: the defaults, untouched. */
  memset(&rs, 0, sizeof rs);
  p = def;
  assert_null(r2s__rules_decide(&rs, &c, &p));
  assert_int_equal(p.upgrade.mode, R2S_UPGRADE_AUTO);
  /* Only upgrade=never rules: nothing a rule allows. */
  r = rule("upgrade=never");
  r2s__rules_add(&rs, &r);
  assert_false(rs.may_upgrade);
  /* A full table refuses more. */
  for (int i = 1; i < R2S_RULES_MAX; i++) assert_true(r2s__rules_add(&rs, &r));
  assert_false(r2s__rules_add(&rs, &r));
  assert_int_equal(rs.n, R2S_RULES_MAX);
}

/* ---- the file ---------------------------------------------------------- */

typedef struct seen_s {
  unsigned n;
  unsigned line[80];
  char msg[80][256];
} seen_t;

static void record(void *arg, const char *file, unsigned line, const char *msg)
{
  seen_t *s = arg;
  assert_non_null(file);
  if (s->n < 80) {
    s->line[s->n] = line;
    snprintf(s->msg[s->n], sizeof s->msg[0], "%s", msg);
  }
  s->n++;
}

static r2s_options_t opts;
static r2s_rules_t rules;
static seen_t seen;

static r2s_conf_t *fresh_conf(const bool *locked)
{
  static r2s_conf_t cf;
  r2s__options_release(&opts);
  opts = r2s__opt;
  opts.stats_file = opts.device = opts.config = NULL; /* the process's copies are not ours to free */
  memset(&rules, 0, sizeof rules);
  memset(&seen, 0, sizeof seen);
  memset(&cf, 0, sizeof cf);
  cf.file = "test.conf";
  cf.opt = &opts;
  cf.locked = locked;
  cf.rules = &rules;
  cf.resolve = fake_users;
  cf.warn = record;
  cf.arg = &seen;
  return &cf;
}

static void parse_text(r2s_conf_t *cf, const char *text)
{
  r2s__conf_parse(cf, text, strlen(text));
}

static void test_file_lines(void **state)
{
  (void)state;
  r2s_conf_t *cf = fresh_conf(NULL);
  parse_text(cf, "# a comment\n"
                 "\n"
                 "   \t  \n"
                 "upgrade = never   # after a blank, a comment\n"
                 "Ring_Size=1M\r\n"
                 "stats_file = /tmp/a#b\n"
                 "skip_ports = 22,3306\n"
                 "  rule upgrade=now port=6379 # allow redis\n"
                 "RULE\tupgrade=never\tprogram=sshd\n"
                 "skip_ports = 1\n"                 /* the last line of a name wins */
                 "rule upgrade=now user=postgres"); /* no newline at the end */
  assert_int_equal(seen.n, 0);
  assert_int_equal(cf->bad, 0);
  assert_int_equal(cf->options, 5);
  assert_int_equal(opts.upgrade.mode, R2S_UPGRADE_NEVER);
  assert_int_equal(opts.ring_size, 1u << 20);
  assert_string_equal(opts.stats_file, "/tmp/a#b"); /* a '#' inside a word is the word's */
  assert_int_equal(opts.skip_ports.n, 1);
  assert_true(cf->set[R2S_OPT_UPGRADE] && cf->set[R2S_OPT_RING_SIZE] && !cf->set[R2S_OPT_LOG]);
  assert_int_equal(rules.n, 3);
  assert_int_equal(rules.rule[0].line, 8);
  assert_int_equal(rules.rule[1].line, 9);
  assert_int_equal(rules.rule[2].line, 11);
  assert_true(rules.may_upgrade);
  assert_string_equal(rules.file, "test.conf");
}

static void test_file_bad_lines(void **state)
{
  (void)state;
  r2s_conf_t *cf = fresh_conf(NULL);
  char big[R2S_CONF_LINE_MAX + 40];
  memset(big, 'x', sizeof big);
  memcpy(big, "upgrade = ", 10);
  big[sizeof big - 1] = '\0';
  char text[4096];
  int n = snprintf(text, sizeof text,
                   "upgrade = now\n"              /* 1 good */
                   "bogus = 1\n"                  /* 2 unknown option */
                   "R2SOCK_LOG = info\n"          /* 3 with the prefix */
                   "upgrade = sometimes\n"        /* 4 bad value */
                   "config = /etc/other.conf\n"   /* 5 the file's own name */
                   "just words\n"                 /* 6 neither */
                   "rule upgrade=never prog=x\n"  /* 7 bad rule */
                   "rule\n"                       /* 8 no action */
                   "%s\n"                         /* 9 too long */
                   "ring_size = 3000\n"           /* 10 bad value */
                   "rule upgrade=never port=22\n" /* 11 good */
                   "= 5\n",                       /* 12 no name */
                   big);
  assert_true(n > 0 && (size_t)n < sizeof text);
  /* Line 13: a NUL byte, which the text's length still covers. */
  memcpy(text + n, "upgrade = n\0w\nlog = debug\n", 26);
  r2s__conf_parse(cf, text, (size_t)n + 26);
  static const unsigned want[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13};
  static const char *const says[] = {"unknown option 'bogus'",
                                     "unknown option 'R2SOCK_LOG' (write option names without R2SOCK_)",
                                     "UPGRADE = sometimes is not valid (expected never, now, auto",
                                     "only be set in the environment",
                                     "expected 'NAME = value' or 'rule KEY=VALUE...', found 'just words'",
                                     "unknown key 'prog'",
                                     "a rule needs an action",
                                     "longer than 1024 bytes",
                                     "RING_SIZE = 3000 is not valid (expected auto, or a power of two",
                                     "expected 'NAME = value'",
                                     "a NUL byte"};
  /* Exactly one message per bad line, in order, with its number. */
  assert_int_equal(seen.n, sizeof want / sizeof want[0]);
  assert_int_equal(cf->bad, seen.n);
  for (size_t i = 0; i < seen.n; i++) {
    assert_int_equal(seen.line[i], want[i]);
    if (!strstr(seen.msg[i], says[i]))
      fail_msg("line %u: '%s' does not say '%s'", want[i], seen.msg[i], says[i]);
  }
  /* The good lines applied; the bad ones changed nothing. */
  assert_int_equal(opts.upgrade.mode, R2S_UPGRADE_NOW);
  assert_int_equal(opts.ring_size, r2s__opt.ring_size);
  assert_int_equal(opts.log_level, R2S_LOG_DEBUG); /* after the NUL line */
  assert_int_equal(rules.n, 1);
  assert_int_equal(rules.rule[0].line, 11);

  /* More rules than the table holds: each extra line is one bad line. */
  cf = fresh_conf(NULL);
  char *many = malloc(64 * (R2S_RULES_MAX + 3));
  assert_non_null(many);
  size_t at = 0;
  for (int i = 0; i < R2S_RULES_MAX + 2; i++)
    at += (size_t)sprintf(many + at, "rule upgrade=never port=%d\n", i + 1);
  r2s__conf_parse(cf, many, at);
  free(many);
  assert_int_equal(rules.n, R2S_RULES_MAX);
  assert_int_equal(seen.n, 2);
  assert_int_equal(seen.line[0], R2S_RULES_MAX + 1);
  assert_non_null(strstr(seen.msg[1], "more than 64 rules"));
}

static void test_file_env_wins(void **state)
{
  (void)state;
  bool locked[R2S_OPT_COUNT] = {false};
  locked[R2S_OPT_RING_SIZE] = true;
  locked[R2S_OPT_STATS_FILE] = true;
  r2s_conf_t *cf = fresh_conf(locked);
  opts.ring_size = 2u << 20; /* what the environment said */
  parse_text(cf, "ring_size = 1M\nupgrade = now\nstats_file = /tmp/from-file\nring_size = 5\n");
  assert_int_equal(opts.ring_size, 2u << 20);
  assert_null(opts.stats_file);
  assert_int_equal(opts.upgrade.mode, R2S_UPGRADE_NOW);
  /* A line the environment overrides is still checked. */
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.line[0], 4);
}

/* A file of exactly n bytes of option lines, at path. */
static void write_file(const char *path, size_t n)
{
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  static const char line[] = "spin_us = 21\n";
  size_t done = 0;
  while (done + sizeof line - 1 <= n) done += fwrite(line, 1, sizeof line - 1, f);
  for (; done < n; done++) fputc('#', f);
  assert_int_equal(fclose(f), 0);
}

static void test_file_reading(void **state)
{
  (void)state;
  char dir[] = "/tmp/r2s-rules-XXXXXX", path[128];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/r2sock.conf", dir);

  /* Exactly the limit: read. One byte more: refused, nothing applies. */
  write_file(path, R2S_CONF_MAX_BYTES);
  r2s_conf_t *cf = fresh_conf(NULL);
  assert_int_equal(r2s__conf_load(cf, path, true), 0);
  assert_int_equal(opts.spin_us, 21);
  assert_int_equal(seen.n, 0);
  write_file(path, R2S_CONF_MAX_BYTES + 1);
  cf = fresh_conf(NULL);
  assert_int_equal(r2s__conf_load(cf, path, true), -EFBIG);
  assert_int_equal(opts.spin_us, r2s__opt.spin_us);
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.line[0], 0);
  assert_non_null(strstr(seen.msg[0], "larger than 64 KiB"));
  assert_int_equal(cf->bad, 0);

  /* Missing: silent for the default file, a warning for a named one. */
  cf = fresh_conf(NULL);
  assert_int_equal(r2s__conf_load(cf, "/nonexistent/r2sock.conf", false), -ENOENT);
  assert_int_equal(seen.n, 0);
  cf = fresh_conf(NULL);
  assert_int_equal(r2s__conf_load(cf, "/nonexistent/r2sock.conf", true), -ENOENT);
  assert_int_equal(seen.n, 1);
  assert_non_null(strstr(seen.msg[0], "cannot open it (No such file or directory)"));

  /* Not a regular file: a directory, a FIFO (never waited on), a device. */
  const char *odd[] = {dir, path, "/dev/zero"};
  unlink(path);
  assert_int_equal(mkfifo(path, 0600), 0);
  for (int i = 0; i < 3; i++) {
    cf = fresh_conf(NULL);
    assert_int_equal(r2s__conf_load(cf, odd[i], true), -EINVAL);
    assert_int_equal(seen.n, 1);
    assert_non_null(strstr(seen.msg[0], "not a regular file"));
  }
  unlink(path);

  /* A regular file whose read fails: /proc/self/mem at offset 0. */
  cf = fresh_conf(NULL);
  assert_int_equal(r2s__conf_load(cf, "/proc/self/mem", true), -EIO);
  assert_non_null(strstr(seen.msg[0], "cannot read it"));

  /* Unreadable for its user: mode 0, read by a process of another user
   * where this one is root (root reads anything). */
  write_file(path, 100);
  assert_int_equal(chmod(path, 0), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) _exit(3);
    cf = fresh_conf(NULL);
    int rc = r2s__conf_load(cf, path, true);
    _exit(rc == -EACCES && seen.n == 1 && strstr(seen.msg[0], "Permission denied") ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  unlink(path);
  rmdir(dir);
}

static void test_passwd(void **state)
{
  (void)state;
  uint32_t uid = 7;
  assert_int_equal(r2s__passwd_uid("root", &uid), 0);
  assert_int_equal(uid, 0);
  assert_int_equal(r2s__passwd_uid("no-such-user-here", &uid), -ENOENT);
  assert_int_equal(r2s__passwd_uid("roo", &uid), -ENOENT); /* a prefix of a name is not the name */
  assert_int_equal(r2s__passwd_uid("", &uid), -ENOENT);
}

/* The process's own load, from the defaults as at start-up. */
static r2s_options_t defaults;
static void load_fresh(void)
{
  r2s__options_release(&r2s__opt);
  r2s__opt = defaults;
  r2s__options_load();
}

/* The process's own load: environment first, then the file. */
static void test_load_env_over_file(void **state)
{
  (void)state;
  r2s_options_t saved = r2s__opt;
  defaults = r2s__opt;
  defaults.stats_file = defaults.device = defaults.config = NULL;
  r2s__opt.stats_file = r2s__opt.device = r2s__opt.config = NULL;
  char path[] = "/tmp/r2s-rules-load-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char text[] = "upgrade = now\nring_size = 1M\nspin_us = 5\nrule upgrade=never port=6379\n";
  assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  setenv("R2SOCK_CONFIG", path, 1);
  setenv("R2SOCK_RING_SIZE", "2M", 1);
  setenv("R2SOCK_SPIN_US", "bad", 1); /* a bad value: the file's then applies */
  load_fresh();
  assert_int_equal(r2s__opt.upgrade.mode, R2S_UPGRADE_NOW); /* the file's */
  assert_int_equal(r2s__opt.ring_size, 2u << 20);           /* the environment's */
  assert_int_equal(r2s__opt.spin_us, 5);
  assert_int_equal(r2s__rules.n, 1);
  assert_true(r2s__rules.may_upgrade == false); /* its one rule says never */
  assert_string_equal(r2s__rules.file, path);

  /* R2SOCK_UPGRADE=never from the environment: no rule applies. */
  setenv("R2SOCK_UPGRADE", "never", 1);
  load_fresh();
  assert_int_equal(r2s__opt.upgrade.mode, R2S_UPGRADE_NEVER);
  assert_int_equal(r2s__rules.n, 0);
  assert_int_equal(r2s__rules.overridden, 1);
  /* ... but upgrade = never from the file is only a default. */
  unsetenv("R2SOCK_UPGRADE");
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  const char text2[] = "upgrade = never\nrule upgrade=now port=6379\n";
  assert_int_equal(write(fd, text2, sizeof text2 - 1), (ssize_t)(sizeof text2 - 1));
  close(fd);
  load_fresh();
  assert_int_equal(r2s__opt.upgrade.mode, R2S_UPGRADE_NEVER);
  assert_int_equal(r2s__rules.n, 1);
  assert_true(r2s__rules.may_upgrade);

  /* R2SOCK_CONFIG= : no file at all. */
  setenv("R2SOCK_CONFIG", "", 1);
  load_fresh();
  assert_int_equal(r2s__rules.n, 0);
  assert_int_equal(r2s__opt.upgrade.mode, defaults.upgrade.mode);
  assert_int_equal(r2s__opt.spin_us, defaults.spin_us);

  unsetenv("R2SOCK_CONFIG");
  unsetenv("R2SOCK_RING_SIZE");
  unsetenv("R2SOCK_SPIN_US");
  unlink(path);
  r2s__options_release(&r2s__opt);
  memset(&r2s__rules, 0, sizeof r2s__rules);
  r2s__opt = saved;
}

static void test_format_round_trip(void **state)
{
  (void)state;
  const char *lines[] = {"upgrade=never program=rsync,sshd", "upgrade=now port=6379",
                         "upgrade=65536 transport=rdma lport=8000-8100 peer=10.0.0.0/8 user=0,120",
                         "transport=shm peer=fd00::/8,127.0.0.1/32", "upgrade=auto"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char buf[512];
    r2s_rule_t r = rule(lines[i]);
    assert_string_equal(r2s__rule_format(&r, buf, sizeof buf), lines[i]);
  }
  /* Truncated, still a string. */
  char small[8];
  r2s_rule_t r = rule("upgrade=never program=rsync");
  r2s__rule_format(&r, small, sizeof small);
  assert_true(strlen(small) > 0 && strlen(small) < sizeof small);
  assert_memory_equal(small, "upgrade=never", strlen(small));
}

/* The file is read through the libc table (conffile.c). */
static int setup(void **state)
{
  (void)state;
  return r2s__libc_load();
}

static int teardown(void **state)
{
  (void)state;
  r2s__options_release(&opts);
  return 0;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule_syntax),
      cmocka_unit_test(test_ports_and_programs),
      cmocka_unit_test(test_networks),
      cmocka_unit_test(test_first_match_wins),
      cmocka_unit_test(test_file_lines),
      cmocka_unit_test(test_file_bad_lines),
      cmocka_unit_test(test_file_env_wins),
      cmocka_unit_test(test_file_reading),
      cmocka_unit_test(test_passwd),
      cmocka_unit_test(test_load_env_over_file),
      cmocka_unit_test(test_format_round_trip),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * fuzz_conf - libFuzzer target for the rules file's parser (src/conffile.c,
 * src/rules.c): every process the shim is loaded into parses that file, so
 * no input may crash it, read past it or leak.
 *
 * The input is a whole file. Properties checked (abort() on violation, so
 * libFuzzer keeps the input):
 *  - at most one warning per line, in line order, numbered within the file,
 *    and as many as the bad lines counted;
 *  - every rule kept prints back (r2s__rule_format) as a line that parses to
 *    the same rule and prints the same again;
 *  - the matcher's first match is what r2s__rules_decide returns, for a few
 *    connections made from the input's own bytes;
 *  - the input as one rule line (r2s__rule_parse directly) never crashes
 *    and, when it parses, round-trips too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "conffile.h"
#include "options.h"
#include "rules.h"

#define CHECK(c)                                                                                             \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "fuzz_conf: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                       \
      abort();                                                                                               \
    }                                                                                                        \
  } while (0)

/* log.c asks whether the process confined its system calls (sandbox.h);
 * this target does not link the rest of the shim. */
int r2s__sandbox_on;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fake_users(const char *name, uint32_t *uid)
{
  if (strcmp(name, "postgres") == 0) return *uid = 120, 0;
  return -ENOENT;
}

typedef struct seen_s {
  unsigned n, last, lines;
} seen_t;

static void record(void *arg, const char *file, unsigned line, const char *msg)
{
  seen_t *s = arg;
  CHECK(file != NULL && msg != NULL && msg[0] != '\0');
  CHECK(line >= 1 && line <= s->lines); /* parsing text never speaks of the whole file */
  CHECK(line > s->last);                /* one per line, in order */
  CHECK(strlen(msg) < 320);
  s->last = line;
  s->n++;
}

static bool same_rule(const r2s_rule_t *a, const r2s_rule_t *b)
{
  if (a->keys != b->keys) return false;
  if ((a->keys & R2S_RULE_UPGRADE) && (a->policy.upgrade.mode != b->policy.upgrade.mode ||
                                       a->policy.upgrade.after_bytes != b->policy.upgrade.after_bytes))
    return false;
  if ((a->keys & R2S_RULE_TRANSPORT) && a->policy.transport != b->policy.transport) return false;
  if ((a->keys & R2S_RULE_PROGRAM) && memcmp(&a->programs, &b->programs, sizeof a->programs) != 0)
    return false;
  if ((a->keys & R2S_RULE_PORT) && memcmp(&a->ports, &b->ports, sizeof a->ports) != 0) return false;
  if ((a->keys & R2S_RULE_LPORT) && memcmp(&a->lports, &b->lports, sizeof a->lports) != 0) return false;
  if (a->npeers != b->npeers || memcmp(a->peer, b->peer, sizeof a->peer[0] * a->npeers) != 0) return false;
  if (a->nusers != b->nusers || memcmp(a->uid, b->uid, sizeof a->uid[0] * a->nusers) != 0) return false;
  return true;
}

static void round_trip(const r2s_rule_t *r)
{
  char text[2048], again[2048], why[256];
  r2s_rule_t back;
  r2s__rule_format(r, text, sizeof text);
  CHECK(strlen(text) < sizeof text - 1); /* the largest rule fits */
  if (!r2s__rule_parse(text, strlen(text), r->line, fake_users, &back, why, sizeof why)) {
    fprintf(stderr, "fuzz_conf: '%s' does not parse back: %s\n", text, why);
    abort();
  }
  CHECK(same_rule(r, &back));
  r2s__rule_format(&back, again, sizeof again);
  CHECK(strcmp(text, again) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static r2s_rules_t rules;
  static r2s_conf_t cf;
  if (size > R2S_CONF_MAX_BYTES) return 0; /* the reader refuses those */
  /* An exactly sized heap copy: ASan then catches a read of byte size. */
  char *text = malloc(size ? size : 1);
  CHECK(text != NULL);
  memcpy(text, data, size);

  seen_t seen = {0, 0, 0};
  for (size_t i = 0; i < size; i++) seen.lines += text[i] == '\n';
  seen.lines += size && text[size - 1] != '\n';
  r2s_options_t opts = r2s__opt;
  memset(&rules, 0, sizeof rules);
  memset(&cf, 0, sizeof cf);
  cf.file = "fuzz.conf";
  cf.opt = &opts;
  cf.rules = &rules;
  cf.resolve = fake_users;
  cf.warn = record;
  cf.arg = &seen;
  r2s__conf_parse(&cf, text, size);
  CHECK(seen.n == cf.bad);
  CHECK(cf.bad + cf.options + rules.n <= seen.lines); /* each line is one of them at most */
  CHECK(rules.n <= R2S_RULES_MAX);

  uint32_t keys = 0;
  for (uint32_t i = 0; i < rules.n; i++) {
    CHECK(rules.rule[i].line >= 1 && rules.rule[i].line <= seen.lines);
    CHECK(i == 0 || rules.rule[i].line > rules.rule[i - 1].line);
    CHECK(rules.rule[i].keys & (R2S_RULE_UPGRADE | R2S_RULE_TRANSPORT));
    keys |= rules.rule[i].keys;
    round_trip(&rules.rule[i]);
  }
  CHECK(keys == rules.keys);

  /* Connections from the input's first bytes: the first match decides. */
  for (size_t k = 0; k < 4; k++) {
    r2s_rule_conn_t c;
    memset(&c, 0, sizeof c);
    const uint8_t *b = size >= 32 ? data + (k * 7) % (size - 31) : NULL;
    if (b) {
      c.port = (unsigned)(b[0] | b[1] << 8);
      c.lport = (unsigned)(b[2] | b[3] << 8);
      c.family = b[4] & 1 ? AF_INET6 : b[4] & 2 ? AF_INET : 0;
      memcpy(c.addr, b + 5, 16);
      if (b[4] & 4) memcpy(c.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
      c.uid_known = b[21] & 1;
      c.uid = (uint32_t)(b[22] | b[23] << 8);
      c.program = b[24] & 1 ? "rsync" : b[24] & 2 ? NULL : "app";
    }
    r2s_policy_t p = {{R2S_UPGRADE_AUTO, R2S_UPGRADE_AUTO_BYTES}, R2S_TRANSPORT_AUTO};
    const r2s_rule_t *hit = r2s__rules_decide(&rules, &c, &p), *first = NULL;
    for (uint32_t i = 0; i < rules.n && !first; i++)
      if (r2s__rule_match(&rules.rule[i], &c) == R2S_RULE_YES) first = &rules.rule[i];
    CHECK(hit == first);
    if (hit && (hit->keys & R2S_RULE_UPGRADE)) CHECK(p.upgrade.mode == hit->policy.upgrade.mode);
  }
  r2s__options_release(&opts);

  /* The whole input as the text of one rule line. */
  r2s_rule_t r;
  char why[256];
  if (r2s__rule_parse(text, size, 1, fake_users, &r, why, sizeof why))
    round_trip(&r);
  else
    CHECK(why[0] != '\0' && strlen(why) < sizeof why);
  free(text);
  return 0;
}

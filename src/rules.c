/* The rules of the rules file: one rule line's parser, the matcher, and
 * the formatter that prints a rule back as a line would say it. */
#include "rules.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

r2s_rules_t r2s__rules;

/* The longest key=value a line can hold (conffile.h bounds lines). */
#define TOKEN_MAX 1024

const char *r2s__printable(const char *s, size_t n, char *buf, size_t len)
{
  size_t k = 0, max = n > 40 ? 40 : n;
  for (size_t i = 0; i < max && k + 4 < len; i++) buf[k++] = isprint((unsigned char)s[i]) ? s[i] : '?';
  if (n > max && k + 4 < len) {
    memcpy(buf + k, "...", 3);
    k += 3;
  }
  buf[k] = '\0';
  return buf;
}

/* One key of a rule: its bit and its name. */
typedef struct rule_key_s {
  uint32_t bit;
  const char *name;
} rule_key_t;

static const rule_key_t keys[] = {
    {R2S_RULE_UPGRADE, "upgrade"}, {R2S_RULE_TRANSPORT, "transport"}, {R2S_RULE_PROGRAM, "program"},
    {R2S_RULE_PORT, "port"},       {R2S_RULE_LPORT, "lport"},         {R2S_RULE_PEER, "peer"},
    {R2S_RULE_USER, "user"},
};

/* Parses "ADDR" or "ADDR/BITS" (IPv4 dotted quad or IPv6) into *net. */
static bool parse_net(const char *s, size_t n, r2s_rule_net_t *net)
{
  char addr[INET6_ADDRSTRLEN + 1];
  const char *slash = memchr(s, '/', n);
  size_t alen = slash ? (size_t)(slash - s) : n;
  if (alen == 0 || alen >= sizeof addr) return false;
  memcpy(addr, s, alen);
  addr[alen] = '\0';
  memset(net, 0, sizeof *net);
  unsigned max;
  if (memchr(addr, ':', alen)) {
    if (inet_pton(AF_INET6, addr, net->addr) != 1) return false;
    net->family = AF_INET6;
    max = 128;
  } else {
    if (inet_pton(AF_INET, addr, net->addr) != 1) return false;
    net->family = AF_INET;
    max = 32;
  }
  unsigned bits = max;
  if (slash) {
    const char *p = slash + 1, *end = s + n;
    /* Up to three digits, nothing else: no sign, no blank, no "0x". */
    if (p == end || end - p > 3) return false;
    bits = 0;
    for (; p < end; p++) {
      if (!isdigit((unsigned char)*p)) return false;
      bits = bits * 10 + (unsigned)(*p - '0');
    }
    if (bits > max) return false;
  }
  net->bits = (uint8_t)bits;
  /* The host bits are cleared: 10.1.2.3/8 is the network 10.0.0.0/8, and
   * it prints so. */
  for (unsigned i = 0; i < 16; i++) {
    unsigned keep = bits >= 8 * (i + 1) ? 8 : bits > 8 * i ? bits - 8 * i : 0;
    net->addr[i] &= (uint8_t)(0xff00u >> keep);
  }
  return true;
}

static bool net_has(const r2s_rule_net_t *net, int family, const uint8_t *addr)
{
  if (net->family != family) return false;
  unsigned whole = net->bits / 8, rest = net->bits % 8;
  if (memcmp(net->addr, addr, whole) != 0) return false;
  return rest == 0 || ((net->addr[whole] ^ addr[whole]) & (uint8_t)(0xff00u >> rest)) == 0;
}

static bool peer_in(const r2s_rule_t *r, const r2s_rule_conn_t *c)
{
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  /* A dual-stack socket's IPv4 peer comes as ::ffff:a.b.c.d: it is in the
   * IPv4 networks as a.b.c.d, and in the IPv6 ones as itself. */
  bool v4mapped = c->family == AF_INET6 && memcmp(c->addr, mapped, sizeof mapped) == 0;
  for (uint32_t i = 0; i < r->npeers; i++) {
    if (net_has(&r->peer[i], c->family, c->addr)) return true;
    if (v4mapped && net_has(&r->peer[i], AF_INET, c->addr + 12)) return true;
  }
  return false;
}

/* A uid as the kernel has them: decimal, 0 to 4294967294 (-1 is "none"). */
static bool parse_uid(const char *s, uint32_t *uid)
{
  uint64_t v = 0;
  if (!*s || strlen(s) > 10) return false;
  for (; *s; s++) {
    if (!isdigit((unsigned char)*s)) return false;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  if (v >= UINT32_MAX) return false;
  *uid = (uint32_t)v;
  return true;
}

/* The value of one key, NUL-terminated in v; false with *why filled. */
static bool parse_value(r2s_rule_t *r, uint32_t bit, const char *name, char *v, r2s_user_resolver_t *resolve,
                        char *why, size_t whylen)
{
  char q[64];
  size_t vlen = strlen(v);
  switch (bit) {
  case R2S_RULE_UPGRADE:
    if (r2s__parse_upgrade(v, &r->policy.upgrade)) return true;
    snprintf(why, whylen, "upgrade=%s: expected never, now, auto or a size such as 64K",
             r2s__printable(v, vlen, q, sizeof q));
    return false;
  case R2S_RULE_TRANSPORT:
    if (r2s__parse_transport(v, &r->policy.transport)) return true;
    if (strcasecmp(v, "tcp") == 0)
      snprintf(why, whylen, "transport=tcp: not a transport (upgrade=never keeps connections on TCP)");
    else
      snprintf(why, whylen, "transport=%s: expected auto, shm or rdma", r2s__printable(v, vlen, q, sizeof q));
    return false;
  case R2S_RULE_PROGRAM:
    /* "none" is a list's way to be empty, which a match key cannot be. */
    if (strcasecmp(v, "none") != 0 && r2s__parse_programs(v, &r->programs)) return true;
    snprintf(why, whylen,
             "program=%s: expected up to %d file names (no '/', under %d bytes) such as rsync,app",
             r2s__printable(v, vlen, q, sizeof q), R2S_PROGRAMS_MAX, R2S_PROGRAM_NAME_MAX);
    return false;
  case R2S_RULE_PORT:
  case R2S_RULE_LPORT:
    if (strcasecmp(v, "none") != 0 && r2s__parse_ports(v, bit == R2S_RULE_PORT ? &r->ports : &r->lports))
      return true;
    snprintf(why, whylen, "%s=%s: expected up to %d ports and ranges (1-65535) such as 22,6379,8000-8100",
             name, r2s__printable(v, vlen, q, sizeof q), R2S_PORTS_MAX);
    return false;
  case R2S_RULE_PEER:
    for (char *p = v;;) {
      size_t n = strcspn(p, ",");
      if (r->npeers == R2S_RULE_PEERS_MAX) {
        snprintf(why, whylen, "peer=: more than %d addresses or networks", R2S_RULE_PEERS_MAX);
        return false;
      }
      if (!parse_net(p, n, &r->peer[r->npeers])) {
        snprintf(why, whylen,
                 "peer=: '%s' is not an IPv4 or IPv6 address or network such as 10.0.0.0/8 or fd00::/8",
                 r2s__printable(p, n, q, sizeof q));
        return false;
      }
      r->npeers++;
      if (p[n] == '\0') return true;
      p += n + 1;
    }
  case R2S_RULE_USER:
    for (char *p = v;;) {
      size_t n = strcspn(p, ",");
      char sep = p[n];
      p[n] = '\0';
      if (r->nusers == R2S_RULE_USERS_MAX) {
        snprintf(why, whylen, "user=: more than %d users", R2S_RULE_USERS_MAX);
        return false;
      }
      uint32_t *uid = &r->uid[r->nusers];
      if (n == 0) {
        snprintf(why, whylen, "user=: an empty name in the list");
        return false;
      }
      if (!isdigit((unsigned char)p[0])) {
        if (!resolve || resolve(p, uid) != 0) {
          snprintf(why, whylen, "user=: no user named '%s' on this system",
                   r2s__printable(p, n, q, sizeof q));
          return false;
        }
      } else if (!parse_uid(p, uid)) {
        snprintf(why, whylen, "user=: '%s' is not a uid (0 to 4294967294) or a name",
                 r2s__printable(p, n, q, sizeof q));
        return false;
      }
      r->nusers++;
      if (sep == '\0') return true;
      p += n + 1;
    }
  }
  snprintf(why, whylen, "%s: not a key", name); /* unreachable: bit comes from keys[] */
  return false;
}

bool r2s__rule_parse(const char *text, size_t len, uint32_t line, r2s_user_resolver_t *resolve,
                     r2s_rule_t *out, char *why, size_t whylen)
{
  char tok[TOKEN_MAX + 1], q[64];
  memset(out, 0, sizeof *out);
  out->line = line;
  size_t i = 0;
  for (;;) {
    while (i < len && (text[i] == ' ' || text[i] == '\t')) i++;
    if (i == len) break;
    size_t start = i;
    while (i < len && text[i] != ' ' && text[i] != '\t') i++;
    size_t n = i - start;
    const char *t = text + start;
    const char *eq = memchr(t, '=', n);
    if (!eq || eq == t) {
      snprintf(why, whylen, "expected KEY=VALUE, found '%s'", r2s__printable(t, n, q, sizeof q));
      return false;
    }
    if (memchr(t, '\0', n)) {
      snprintf(why, whylen, "a NUL byte in '%s'", r2s__printable(t, n, q, sizeof q));
      return false;
    }
    size_t klen = (size_t)(eq - t);
    const rule_key_t *k = NULL;
    for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
      if (strlen(keys[j].name) == klen && strncasecmp(t, keys[j].name, klen) == 0) k = &keys[j];
    if (!k) {
      snprintf(why, whylen,
               "unknown key '%s' (match keys: program, port, lport, peer, user; actions: upgrade, transport)",
               r2s__printable(t, klen, q, sizeof q));
      return false;
    }
    if (out->keys & k->bit) {
      snprintf(why, whylen, "%s= given twice", k->name);
      return false;
    }
    size_t vlen = n - klen - 1;
    if (vlen == 0) {
      snprintf(why, whylen, "%s= has no value", k->name);
      return false;
    }
    if (vlen > TOKEN_MAX) {
      snprintf(why, whylen, "%s= has a value of %zu bytes (at most %d)", k->name, vlen, TOKEN_MAX);
      return false;
    }
    memcpy(tok, eq + 1, vlen);
    tok[vlen] = '\0';
    if (!parse_value(out, k->bit, k->name, tok, resolve, why, whylen)) return false;
    out->keys |= k->bit;
  }
  if (!(out->keys & (R2S_RULE_UPGRADE | R2S_RULE_TRANSPORT))) {
    snprintf(why, whylen, "a rule needs an action: upgrade=never|now|auto|SIZE or transport=auto|shm|rdma");
    return false;
  }
  return true;
}

/* Whether c says what match key bit asks about. */
static bool key_known(const r2s_rule_conn_t *c, uint32_t bit)
{
  switch (bit) {
  case R2S_RULE_PROGRAM:
    return c->program != NULL;
  case R2S_RULE_PORT:
    return c->port != 0;
  case R2S_RULE_LPORT:
    return c->lport != 0;
  case R2S_RULE_PEER:
    return c->family != 0;
  default:
    return c->uid_known;
  }
}

/* Whether c's value for match key bit (known) is among r's. */
static bool key_in(const r2s_rule_t *r, const r2s_rule_conn_t *c, uint32_t bit)
{
  switch (bit) {
  case R2S_RULE_PROGRAM:
    return r2s__programs_has(&r->programs, c->program);
  case R2S_RULE_PORT:
    return r2s__ports_has(&r->ports, c->port);
  case R2S_RULE_LPORT:
    return r2s__ports_has(&r->lports, c->lport);
  case R2S_RULE_PEER:
    return peer_in(r, c);
  default:
    for (uint32_t i = 0; i < r->nusers; i++)
      if (r->uid[i] == c->uid) return true;
    return false;
  }
}

r2s_rule_verdict_t r2s__rule_match(const r2s_rule_t *r, const r2s_rule_conn_t *c)
{
  bool unknown = false;
  for (uint32_t bit = R2S_RULE_PROGRAM; bit <= R2S_RULE_USER; bit <<= 1) {
    if (!(r->keys & bit)) continue;
    if (!key_known(c, bit))
      unknown = true;
    else if (!key_in(r, c, bit))
      return R2S_RULE_NO; /* one key that does not match decides */
  }
  return unknown ? R2S_RULE_UNKNOWN : R2S_RULE_YES;
}

const r2s_rule_t *r2s__rules_decide(const r2s_rules_t *rs, const r2s_rule_conn_t *c, r2s_policy_t *p)
{
  for (uint32_t i = 0; i < rs->n; i++) {
    const r2s_rule_t *r = &rs->rule[i];
    if (r2s__rule_match(r, c) != R2S_RULE_YES) continue;
    if (r->keys & R2S_RULE_UPGRADE) p->upgrade = r->policy.upgrade;
    if (r->keys & R2S_RULE_TRANSPORT) p->transport = r->policy.transport;
    return r;
  }
  return NULL;
}

bool r2s__rules_add(r2s_rules_t *rs, const r2s_rule_t *r)
{
  if (rs->n == R2S_RULES_MAX) return false;
  rs->rule[rs->n++] = *r;
  rs->keys |= r->keys;
  if ((r->keys & R2S_RULE_UPGRADE) && r->policy.upgrade.mode != R2S_UPGRADE_NEVER) rs->may_upgrade = true;
  return true;
}

/* Appends to buf at *at what fmt says, never past len. */
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
  if (*at >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

const char *r2s__rule_format(const r2s_rule_t *r, char *buf, size_t len)
{
  char v[512];
  size_t at = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  if (r->keys & R2S_RULE_UPGRADE) {
    const r2s_opt_upgrade_t *u = &r->policy.upgrade;
    if (u->mode == R2S_UPGRADE_AFTER)
      put(buf, len, &at, " upgrade=%" PRIu64, u->after_bytes);
    else
      put(buf, len, &at, " upgrade=%s",
          u->mode == R2S_UPGRADE_NEVER ? "never"
          : u->mode == R2S_UPGRADE_NOW ? "now"
                                       : "auto");
  }
  if (r->keys & R2S_RULE_TRANSPORT)
    put(buf, len, &at, " transport=%s", r2s__format_transport(&r->policy.transport, v, sizeof v));
  if (r->keys & R2S_RULE_PROGRAM)
    put(buf, len, &at, " program=%s", r2s__format_programs(&r->programs, v, sizeof v));
  if (r->keys & R2S_RULE_PORT) put(buf, len, &at, " port=%s", r2s__format_ports(&r->ports, v, sizeof v));
  if (r->keys & R2S_RULE_LPORT) put(buf, len, &at, " lport=%s", r2s__format_ports(&r->lports, v, sizeof v));
  if (r->keys & R2S_RULE_PEER) {
    for (uint32_t i = 0; i < r->npeers; i++) {
      const r2s_rule_net_t *n = &r->peer[i];
      if (!inet_ntop(n->family == AF_INET6 ? AF_INET6 : AF_INET, n->addr, v, sizeof v))
        snprintf(v, sizeof v, "?");
      put(buf, len, &at, "%s%s/%u", i ? "," : " peer=", v, n->bits);
    }
  }
  if (r->keys & R2S_RULE_USER)
    for (uint32_t i = 0; i < r->nusers; i++) put(buf, len, &at, "%s%" PRIu32, i ? "," : " user=", r->uid[i]);
  /* Without the leading blank every key was put with. */
  if (buf[0] == ' ') memmove(buf, buf + 1, strlen(buf));
  return buf;
}

void r2s__rule_conn_peer(r2s_rule_conn_t *c, const struct sockaddr *sa)
{
  c->family = 0;
  if (sa->sa_family == AF_INET) {
    c->family = AF_INET;
    memcpy(c->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    c->family = AF_INET6;
    memcpy(c->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
}

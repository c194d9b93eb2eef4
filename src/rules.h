/*
 * rules.h - the ordered per-connection rules of the rules file, and the
 * one matcher that the shim and `r2sock-run --check --explain` share.
 *
 * Contract:
 *  - A rule is one line `rule KEY=VALUE...` of the rules file (conffile.h):
 *    match keys (program, port, lport, peer, user; a rule without one
 *    matches every connection) and actions (upgrade, transport; at least
 *    one). Values use the syntax of the R2SOCK_* variables of the same
 *    kind; lists are comma-separated. README, "Rules file", is the user's
 *    description.
 *  - r2s__rule_parse() parses the text after the word `rule` into an
 *    r2s_rule_t (the fields of keys it lacks zeroed), or fails with one
 *    sentence saying what is wrong. It reads nothing but
 *    its input (user names go through the caller's resolver), allocates
 *    nothing and accepts any bytes.
 *  - The first rule that matches decides; the rest are not looked at.
 *    Matching reads only the rule and the connection's description: no
 *    system call, no allocation, no lock (the table is written once, at
 *    start-up, before any connection exists).
 *  - A key the description leaves unknown (no peer address, say) makes a
 *    rule that has it not match; r2s__rule_match says "unknown" rather than
 *    "no" then, for the explanation.
 */
#ifndef R2S_RULES_H
#define R2S_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"

#define R2S_RULES_MAX      64 /* rules a file may hold; more are refused, each with a warning */
#define R2S_RULE_PEERS_MAX 8  /* addresses or networks in one peer= */
#define R2S_RULE_USERS_MAX 8  /* names or uids in one user= */

/* Match keys and actions, as bits of r2s_rule_t.keys. */
enum {
  R2S_RULE_PROGRAM = 1u << 0,
  R2S_RULE_PORT = 1u << 1,
  R2S_RULE_LPORT = 1u << 2,
  R2S_RULE_PEER = 1u << 3,
  R2S_RULE_USER = 1u << 4,
  R2S_RULE_UPGRADE = 1u << 5,
  R2S_RULE_TRANSPORT = 1u << 6,
};
/* The keys whose value comes from the connection's addresses. */
#define R2S_RULE_ADDRESS_KEYS (R2S_RULE_PORT | R2S_RULE_LPORT | R2S_RULE_PEER)

/* An IPv4 or IPv6 network: addr with its host bits cleared. */
typedef struct r2s_rule_net_s {
  uint8_t family; /* AF_INET or AF_INET6 */
  uint8_t bits;   /* prefix length */
  uint8_t addr[16];
} r2s_rule_net_t;

typedef struct r2s_rule_s {
  uint32_t line; /* in the file, for the explanation and the log */
  uint32_t keys; /* R2S_RULE_* present on the line */
  r2s_opt_programs_t programs;
  r2s_opt_ports_t ports, lports;
  uint32_t npeers, nusers;
  r2s_rule_net_t peer[R2S_RULE_PEERS_MAX];
  uint32_t uid[R2S_RULE_USERS_MAX];
  r2s_policy_t policy; /* the actions; only those in keys apply */
} r2s_rule_t;

typedef struct r2s_rules_s {
  uint32_t n;
  uint32_t keys;       /* the union of the rules' keys */
  bool may_upgrade;    /* some rule's upgrade is not never */
  uint32_t overridden; /* rules set aside (n is 0): R2SOCK_UPGRADE=never came from the environment */
  char file[256];      /* where they came from (truncated), for messages */
  r2s_rule_t rule[R2S_RULES_MAX];
} r2s_rules_t;

/* The process's rules: empty unless a rules file has some. */
extern r2s_rules_t r2s__rules;

/* Some connection of this process may upgrade: the options' policy, or a
 * rule of the file, is not upgrade=never. */
static inline bool r2s__upgrades_possible(void)
{
  return r2s__opt.upgrade.mode != R2S_UPGRADE_NEVER || r2s__rules.may_upgrade;
}

/* What the matcher knows of one connection. */
typedef struct r2s_rule_conn_s {
  const char *program;  /* the executable's file name; NULL: unknown */
  unsigned port, lport; /* the peer's and our port; 0: unknown */
  int family;           /* of addr: AF_INET, AF_INET6, or 0: unknown peer */
  uint8_t addr[16];     /* the peer's address (an IPv4-mapped one matches IPv4 networks too) */
  bool uid_known;
  uint32_t uid; /* the process's effective uid */
} r2s_rule_conn_t;

typedef enum { R2S_RULE_NO = 0, R2S_RULE_YES = 1, R2S_RULE_UNKNOWN = 2 } r2s_rule_verdict_t;

/* Resolves a user name to its uid: 0, or -ENOENT when there is none. */
typedef int r2s_user_resolver_t(const char *name, uint32_t *uid);

/* Parses the text of a rule line after the word `rule` (len bytes, no
 * newline) into *out, with line as its line number. false: *why (at most
 * whylen bytes, NUL-terminated) says what is wrong; *out is then garbage. */
bool r2s__rule_parse(const char *text, size_t len, uint32_t line, r2s_user_resolver_t *resolve,
                     r2s_rule_t *out, char *why, size_t whylen);

/* Whether rule r matches connection c (UNKNOWN: only because c leaves a
 * key the rule has unknown). */
r2s_rule_verdict_t r2s__rule_match(const r2s_rule_t *r, const r2s_rule_conn_t *c);

/* The first rule of rs that matches c, or NULL; with one, *p gets the
 * rule's actions over what it held (the defaults). */
const r2s_rule_t *r2s__rules_decide(const r2s_rules_t *rs, const r2s_rule_conn_t *c, r2s_policy_t *p);

/* Appends r to rs (its keys and may_upgrade too); false when rs is full. */
bool r2s__rules_add(r2s_rules_t *rs, const r2s_rule_t *r);

/* The rule as a line of the file would say it, keys in a fixed order and
 * users by uid: "upgrade=never port=22,3306 ...". Returns buf (always
 * NUL-terminated; truncated to len). */
const char *r2s__rule_format(const r2s_rule_t *r, char *buf, size_t len);

/* s (n bytes) for a message, in buf: at most 40 bytes of it, anything
 * unprintable as '?', so that a line of binary junk makes a readable
 * warning, and a file that the user running a program may not read
 * cannot be copied out through the warnings at length. Returns buf. */
const char *r2s__printable(const char *s, size_t n, char *buf, size_t len);

/* Fills c->family/addr from a socket address (sockaddr_in or _in6; any
 * other family leaves the peer unknown). */
struct sockaddr;
void r2s__rule_conn_peer(r2s_rule_conn_t *c, const struct sockaddr *sa);

#endif

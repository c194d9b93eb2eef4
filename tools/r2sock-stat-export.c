/*
 * r2sock-stat --json and --prometheus: one snapshot (r2sock-stat.h) in a
 * form for programs. Every count is exact (printed as an integer, never
 * scaled). Strings from the segments (program names, reasons, counter
 * names) are the processes' own bytes: they are escaped for the format, and
 * a byte that is not part of valid UTF-8 becomes U+FFFD, since both formats
 * are UTF-8 text.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "r2sock-stat.h"
#include "stats.h"

/* The counters this build knows, with their one-line docs (src/stats.h):
 * the HELP text of their metrics. A segment may name others (another
 * version of the shim); they are exported all the same. */
static const struct {
  const char *name, *doc;
} stat_docs[] = {
#define STAT_DOC(name, doc) {#name, doc},
    R2S_STATS(STAT_DOC)
#undef STAT_DOC
};

static const char *const role_names[] = {"socket", "listener", "client", "server"};
static const char *const dir_names[2] = {"tx", "rx"};

/* The length of the valid UTF-8 sequence at s (1 to 4), 0 if there is none. */
static size_t utf8_len(const unsigned char *s)
{
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf; /* no overlongs, no surrogates */
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf; /* up to U+10FFFF */
  else
    return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

enum escape { ESC_JSON, ESC_LABEL, ESC_HELP };

/* Writes s escaped for a JSON string, a Prometheus label value (backslash,
 * double quote, newline) or HELP text (backslash, newline), without the
 * quotes. */
static void put_escaped(FILE *f, const char *str, enum escape how)
{
  for (const unsigned char *s = (const unsigned char *)str; *s;) {
    size_t n = utf8_len(s);
    if (n == 0) {
      fputs(how == ESC_JSON ? "\\ufffd" : "\xef\xbf\xbd", f);
      s++;
      continue;
    }
    unsigned char c = *s;
    if (c == '\\' || (c == '"' && how != ESC_HELP)) {
      fputc('\\', f);
      fputc(c, f);
    } else if (c == '\n' && how != ESC_JSON) {
      fputs("\\n", f);
    } else if (how == ESC_JSON && (c < 0x20 || c == 0x7f)) {
      static const char short_esc[] = {['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r'};
      if (c < sizeof short_esc && short_esc[c])
        fprintf(f, "\\%c", short_esc[c]);
      else
        fprintf(f, "\\u%04x", c);
    } else {
      fwrite(s, 1, n, f);
    }
    s += n;
  }
}

static void put_json_string(const char *s)
{
  putchar('"');
  put_escaped(stdout, s, ESC_JSON);
  putchar('"');
}

static const char *path_name(uint32_t p)
{
  return p < R2S_STATSEG_PATHS ? path_names[p] : "?";
}

/* The reason a tcp_<reason> counter counts, spelled as the connections'
 * reasons are ("tcp_peer_plain": "peer-plain"), in buf; NULL for any other
 * counter. */
static const char *fallback_reason(const char *counter, char *buf, size_t len)
{
  if (strncmp(counter, "tcp_", 4) != 0 || !counter[4]) return NULL;
  snprintf(buf, len, "%s", counter + 4);
  for (char *c = buf; *c; c++)
    if (*c == '_') *c = '-';
  return buf;
}

/* ---- JSON ------------------------------------------------------------- */

/* {"tcp": N, "shm": N, "rdma": N} */
static void json_per_path(const uint64_t v[R2S_STATSEG_PATHS])
{
  putchar('{');
  for (int p = 0; p < R2S_STATSEG_PATHS; p++)
    printf("%s\"%s\": %" PRIu64, p ? ", " : "", path_names[p], v[p]);
  putchar('}');
}

/* {"tx": {per path}, "rx": {per path}} */
static void json_bytes(const uint64_t tx[R2S_STATSEG_PATHS], const uint64_t rx[R2S_STATSEG_PATHS])
{
  printf("{\"tx\": ");
  json_per_path(tx);
  printf(", \"rx\": ");
  json_per_path(rx);
  putchar('}');
}

static void json_addr(const r2s_stat_addr_t *a)
{
  char host[INET6_ADDRSTRLEN];
  int af = a->family == AF_INET ? AF_INET : a->family == AF_INET6 ? AF_INET6 : 0;
  if (!af || !inet_ntop(af, a->addr, host, sizeof host)) {
    printf("null");
    return;
  }
  printf("{\"family\": \"%s\", \"address\": \"%s\", \"port\": %u}", af == AF_INET ? "ipv4" : "ipv6", host,
         a->port);
}

static void json_connection(const struct conn_snap *c)
{
  const r2s_statslot_id_t *id = &c->id;
  printf("        {\"slot\": %" PRIu32 ", \"conn_id\": %" PRIu32 ", \"fd\": %" PRId32
         ", \"state\": \"%s\", \"role\": ",
         c->slot, id->f.conn_id, id->f.fd, id->f.state == R2S_SLOT_LISTEN ? "listen" : "open");
  put_json_string(id->f.role < sizeof role_names / sizeof role_names[0] ? role_names[id->f.role] : "?");
  printf(", \"path\": \"%s\", \"path_tx\": \"%s\", \"path_rx\": \"%s\", \"reason\": ", path_name(id->f.path),
         path_name(id->f.path_tx), path_name(id->f.path_rx));
  if (id->f.reason[0])
    put_json_string(id->f.reason);
  else
    printf("null");
  printf(", \"opened_unix_ns\": %" PRId64 ",\n         \"local\": ", id->f.opened_unix_ns);
  json_addr(&id->f.local);
  printf(", \"peer\": ");
  json_addr(&id->f.peer);
  printf(",\n         \"bytes\": ");
  json_bytes(c->ctr.tx, c->ctr.rx);
  printf(", \"waits\": %" PRIu64 "}", c->ctr.waits);
}

static void json_process(const struct proc_snap *p)
{
  char buf[sizeof p->stat_names];
  printf("    {\"pid\": %d, \"program\": ", p->pid);
  put_json_string(p->program);
  printf(", \"start_ticks\": %" PRIu64 ", \"started_unix_ns\": %" PRId64 ",\n     \"counters\": {",
         p->start_ticks, p->started_unix_ns);
  for (unsigned i = 0; i < p->nstats; i++) {
    printf("%s", i ? ", " : "");
    put_json_string(proc_stat_name(p, i));
    printf(": %" PRIu64, p->stats[i]);
  }
  printf("},\n     \"bytes\": ");
  json_bytes(p->bytes[DIR_TX], p->bytes[DIR_RX]);
  printf(",\n     \"connections_open\": {");
  for (int k = 0; k < R2S_STATSEG_PATHS; k++)
    printf("%s\"%s\": %u", k ? ", " : "", path_names[k], p->by_path[k]);
  printf("}, \"listeners\": %u,\n     \"fallbacks\": {", p->listeners);
  const char *sep = "";
  for (unsigned i = 0; i < p->nstats; i++) {
    const char *why = fallback_reason(proc_stat_name(p, i), buf, sizeof buf);
    if (!why) continue;
    printf("%s", sep);
    put_json_string(why);
    printf(": %" PRIu64, p->stats[i]);
    sep = ", ";
  }
  printf("},\n     \"unlisted_connections\": %" PRIu64 ", \"unread_slots\": %u,\n     \"connections\": [",
         p->overflow, p->busy);
  for (unsigned k = 0; k < p->nc; k++) {
    printf("%s\n", k ? "," : "");
    json_connection(&p->c[k]);
  }
  printf("%s]}", p->nc ? "\n     " : "");
}

void print_json(const struct snapshot *s)
{
  printf("{\"processes\": [");
  for (unsigned i = 0; i < s->np; i++) {
    printf("%s\n", i ? "," : "");
    json_process(&s->p[i]);
  }
  printf("%s],\n \"other_users_hidden\": %u}\n", s->np ? "\n  " : "", s->hidden);
}

/* ---- Prometheus text format 0.0.4 ---------------------------------------- */

#define METRIC_PREFIX "r2sock_"

static void prom_family(const char *name, const char *type, const char *help)
{
  printf("# HELP %s ", name);
  put_escaped(stdout, help, ESC_HELP);
  printf("\n# TYPE %s %s\n", name, type);
}

/* The start of a sample: name{pid="..",program=".." (the caller adds any
 * other labels, then closes with prom_value). */
static void prom_sample(const char *name, const struct proc_snap *p)
{
  printf("%s{pid=\"%d\",program=\"", name, p->pid);
  put_escaped(stdout, p->program, ESC_LABEL);
  putchar('"');
}

static void prom_value(uint64_t v)
{
  printf("} %" PRIu64 "\n", v);
}

/* A counter name usable in a metric name: [a-zA-Z_][a-zA-Z0-9_]*. */
static bool name_ok(const char *s)
{
  if (!*s || strlen(s) > 64 || (*s >= '0' && *s <= '9')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

/* bytes_<path>_tx and _rx: exported as r2sock_bytes_total. */
static bool is_bytes_counter(const char *name)
{
  char want[32];
  for (int p = 0; p < R2S_STATSEG_PATHS; p++)
    for (int d = 0; d < 2; d++) {
      snprintf(want, sizeof want, "bytes_%s_%s", path_names[p], dir_names[d]);
      if (strcmp(name, want) == 0) return true;
    }
  return false;
}

static const char *const own_families[] = {METRIC_PREFIX "bytes_total", METRIC_PREFIX "connections_open",
                                           METRIC_PREFIX "listeners_open", METRIC_PREFIX "fallbacks_total",
                                           METRIC_PREFIX "unlisted_connections_total"};

/* A gauge of the process, not a counter: its name ends in _now
 * (src/stats.h), and it is exported as r2sock_<name without _now>. */
static bool is_gauge(const char *name)
{
  size_t n = strlen(name);
  return n > 4 && strcmp(name + n - 4, "_now") == 0;
}

/* The metric of process counter `name`: r2sock_<name>_total, or for a
 * gauge r2sock_<name without _now>. */
static void metric_name(char *out, size_t len, const char *name)
{
  if (is_gauge(name))
    snprintf(out, len, METRIC_PREFIX "%.*s", (int)(strlen(name) - 4), name);
  else
    snprintf(out, len, METRIC_PREFIX "%s_total", name);
}

/* The process counters exported one metric each: the counters as
 * r2sock_<name>_total (all but the bytes and tcp_* counters, and a name
 * that would be one of the families above), or with gauges set the
 * gauges. Each name once, in the order first seen. Returns how many were
 * put in names[] (room for every counter of every process). */
static unsigned counter_families(const struct snapshot *s, const char **names, bool gauges)
{
  unsigned n = 0;
  char buf[64], metric[96];
  for (unsigned i = 0; i < s->np; i++)
    for (unsigned k = 0; k < s->p[i].nstats; k++) {
      const char *name = proc_stat_name(&s->p[i], k);
      if (!name_ok(name) || is_gauge(name) != gauges || is_bytes_counter(name) ||
          fallback_reason(name, buf, sizeof buf))
        continue;
      metric_name(metric, sizeof metric, name);
      bool skip = false;
      for (unsigned f = 0; f < sizeof own_families / sizeof own_families[0]; f++)
        skip |= !strcmp(metric, own_families[f]);
      for (unsigned j = 0; j < n && !skip; j++) skip = !strcmp(names[j], name);
      if (!skip) names[n++] = name;
    }
  return n;
}

static const char *stat_doc(const char *name)
{
  for (size_t i = 0; i < sizeof stat_docs / sizeof stat_docs[0]; i++)
    if (strcmp(stat_docs[i].name, name) == 0) return stat_docs[i].doc;
  return NULL;
}

void print_prometheus(const struct snapshot *s)
{
  /* No process: no samples, and no family without samples either. */
  if (s->np == 0) return;
  prom_family(METRIC_PREFIX "bytes_total", "counter",
              "Payload bytes moved, by path and direction: connections that ended plus the live ones");
  for (unsigned i = 0; i < s->np; i++)
    for (int p = 0; p < R2S_STATSEG_PATHS; p++)
      for (int d = 0; d < 2; d++) {
        prom_sample(METRIC_PREFIX "bytes_total", &s->p[i]);
        printf(",path=\"%s\",direction=\"%s\"", path_names[p], dir_names[d]);
        prom_value(s->p[i].bytes[d][p]);
      }
  prom_family(METRIC_PREFIX "connections_open", "gauge", "Connections open now, by the path they take");
  for (unsigned i = 0; i < s->np; i++)
    for (int p = 0; p < R2S_STATSEG_PATHS; p++) {
      prom_sample(METRIC_PREFIX "connections_open", &s->p[i]);
      printf(",path=\"%s\"", path_names[p]);
      prom_value(s->p[i].by_path[p]);
    }
  prom_family(METRIC_PREFIX "listeners_open", "gauge", "Listening TCP sockets open now");
  for (unsigned i = 0; i < s->np; i++) {
    prom_sample(METRIC_PREFIX "listeners_open", &s->p[i]);
    prom_value(s->p[i].listeners);
  }
  prom_family(METRIC_PREFIX "unlisted_connections_total", "counter",
              "Connections that found no free statistics slot: not in r2sock_connections_open, their "
              "bytes counted once they end");
  for (unsigned i = 0; i < s->np; i++) {
    prom_sample(METRIC_PREFIX "unlisted_connections_total", &s->p[i]);
    prom_value(s->p[i].overflow);
  }
  char buf[64], metric[96];
  bool head = false;
  for (unsigned i = 0; i < s->np; i++)
    for (unsigned k = 0; k < s->p[i].nstats; k++) {
      const char *name = proc_stat_name(&s->p[i], k), *why = fallback_reason(name, buf, sizeof buf);
      if (!why || !name_ok(name)) continue;
      if (!head)
        prom_family(METRIC_PREFIX "fallbacks_total", "counter",
                    "Connections that ended on kernel TCP, by the reason they stayed there");
      head = true;
      prom_sample(METRIC_PREFIX "fallbacks_total", &s->p[i]);
      printf(",reason=\"");
      put_escaped(stdout, why, ESC_LABEL);
      putchar('"');
      prom_value(s->p[i].stats[k]);
    }
  const char **names = calloc((size_t)s->np * R2S_STATSEG_MAX_STATS, sizeof *names);
  if (!names) {
    fprintf(stderr, "r2sock-stat: out of memory: the other process counters are left out\n");
    return;
  }
  for (int gauges = 0; gauges < 2; gauges++) {
    unsigned n = counter_families(s, names, gauges);
    for (unsigned f = 0; f < n; f++) {
      const char *doc = stat_doc(names[f]);
      char help[128];
      if (!doc) {
        snprintf(help, sizeof help, "The process %s %s (not known to this r2sock-stat)",
                 gauges ? "gauge" : "counter", names[f]);
        doc = help;
      }
      metric_name(metric, sizeof metric, names[f]);
      prom_family(metric, gauges ? "gauge" : "counter", doc);
      for (unsigned i = 0; i < s->np; i++)
        for (unsigned k = 0; k < s->p[i].nstats; k++)
          if (strcmp(proc_stat_name(&s->p[i], k), names[f]) == 0) {
            prom_sample(metric, &s->p[i]);
            prom_value(s->p[i].stats[k]);
            break;
          }
    }
  }
  free(names);
}

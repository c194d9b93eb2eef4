/*
 * r2sock-stat.h - one snapshot of the statistics segments, as r2sock-stat
 * reads them (tools/r2sock-stat.c), and the machine-readable reports made
 * from it (tools/r2sock-stat-export.c).
 *
 * Contract:
 *  - A snapshot is a copy: nothing in it points into a segment, so it stays
 *    valid after the segments are unmapped (or their processes are gone).
 *  - A process's counters are the ones its segment names (stat_names), in
 *    its order, exact, each name once; names are kept as offsets into the
 *    process's own copy of the name list, so the snapshot can be moved
 *    (qsort, realloc).
 *  - bytes[][] are the process counters bytes_<path>_tx/rx (connections that
 *    ended) plus the slots of its live connections: the payload moved so far.
 *    The two are read one after the other, not together, so a connection that
 *    ends during the read may count twice or not at all in that snapshot.
 */
#ifndef R2SOCK_STAT_H
#define R2SOCK_STAT_H

#include <stdint.h>

#include "statseg_layout.h"

enum { DIR_TX = 0, DIR_RX = 1 };

/* The names of the paths, in the order of the layout's per-path counters. */
extern const char *const path_names[R2S_STATSEG_PATHS];

/* One connection as read. */
struct conn_snap {
  uint32_t slot;
  r2s_statslot_id_t id; /* reason[] is NUL-terminated */
  r2s_stat_ctr_t ctr;
  uint64_t tx, rx; /* over all paths */
};

/* One process as read. */
struct proc_snap {
  int pid;
  uint64_t start_ticks;
  int64_t started_unix_ns;
  char program[33];
  uint64_t bytes[2][R2S_STATSEG_PATHS]; /* [DIR_TX|DIR_RX][path], see above */
  uint64_t tx, rx, waits, overflow;     /* bytes over all paths, sleeps, unlisted connections */
  unsigned by_path[R2S_STATSEG_PATHS], listeners, busy;
  unsigned nstats;
  uint16_t stat_at[R2S_STATSEG_MAX_STATS]; /* counter i's name: stat_names + stat_at[i] */
  uint64_t stats[R2S_STATSEG_MAX_STATS];
  char stat_names[sizeof(((r2s_statseg_hdr_t *)0)->stat_names) + 1]; /* NUL-separated */
  struct conn_snap *c;
  unsigned nc;
};

struct snapshot {
  struct proc_snap *p;
  unsigned np;
  unsigned hidden; /* segments of other users' processes */
  double t;        /* CLOCK_MONOTONIC seconds */
};

static inline const char *proc_stat_name(const struct proc_snap *p, unsigned i)
{
  return p->stat_names + p->stat_at[i];
}

/* One snapshot as a JSON document, or in the Prometheus text format
 * (0.0.4), on stdout. */
void print_json(const struct snapshot *s);
void print_prometheus(const struct snapshot *s);

#endif

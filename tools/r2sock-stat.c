/*
 * r2sock-stat: live view of the processes running under r2sock, read from
 * their statistics segments (src/statseg_layout.h), like top.
 *
 *   r2sock-stat [-d SECS] [-n COUNT] [-p PID] [--once] [-c|--connections] [--json|--prometheus]
 *
 * Default: the screen is cleared and redrawn every SECS (1) seconds, one line
 * per process; -c lists each connection. --once prints one snapshot without
 * clearing, with exact byte counts (for scripts); --json and --prometheus
 * print one snapshot for programs (tools/r2sock-stat-export.c). Rates are
 * differences between two refreshes, so the first screen has none. Segments
 * of processes that are gone are removed (when permitted).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "r2sock-stat.h"

#define READ_TRIES 1000 /* seqlock attempts per slot before it is shown as busy */

const char *const path_names[R2S_STATSEG_PATHS] = {"tcp", "shm", "rdma"};

struct opts {
  double delay;
  long count; /* refreshes; <0: until interrupted */
  int pid;    /* 0: every process */
  bool once, conns;
  enum { REPORT_TEXT, REPORT_JSON, REPORT_PROMETHEUS } report;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
  (void)sig;
  stop = 1;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The start time of a running process (field 22 of /proc/PID/stat), 0 if it
 * is gone or a zombie. */
static uint64_t proc_start_ticks(int pid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  char state;
  unsigned long long v;
  if (!p || sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state,
                   &v) != 2)
    return 0;
  return state == 'Z' || state == 'X' ? 0 : v;
}

/* Copies the process counters and their names from the header: the names
 * up to nstats (or as many as the list holds), each value a relaxed load.
 * A name that repeats is kept once, with its first value (the shim never
 * repeats one; reports must not list one twice). */
static void read_stats(const r2s_statseg_hdr_t *h, struct proc_snap *ps)
{
  memcpy(ps->stat_names, h->stat_names, sizeof h->stat_names);
  ps->stat_names[sizeof h->stat_names] = '\0';
  ps->nstats = 0;
  uint32_t i = 0;
  char *save;
  for (char *tok = strtok_r(ps->stat_names, " ", &save); tok && i < h->nstats && i < R2S_STATSEG_MAX_STATS;
       tok = strtok_r(NULL, " ", &save), i++) {
    bool seen = false;
    for (unsigned k = 0; k < ps->nstats && !seen; k++) seen = strcmp(proc_stat_name(ps, k), tok) == 0;
    if (seen) continue;
    ps->stat_at[ps->nstats] = (uint16_t)(tok - ps->stat_names);
    ps->stats[ps->nstats++] = __atomic_load_n(&h->stats[i], __ATOMIC_RELAXED);
  }
}

/* The value of the process counter `name`, 0 if the process has none. */
static uint64_t proc_stat(const struct proc_snap *ps, const char *name)
{
  for (unsigned i = 0; i < ps->nstats; i++)
    if (strcmp(proc_stat_name(ps, i), name) == 0) return ps->stats[i];
  return 0;
}

static void read_slots(const r2s_statseg_hdr_t *h, struct proc_snap *ps)
{
  uint32_t hwm = __atomic_load_n(&h->slots_hwm, __ATOMIC_ACQUIRE);
  if (hwm > h->nslots) hwm = h->nslots;
  ps->c = calloc(hwm ? hwm : 1, sizeof *ps->c);
  if (!ps->c) return;
  for (uint32_t i = 0; i < hwm; i++) {
    const r2s_statslot_t *s = r2s_statseg_slot((void *)h, h->header_size, h->slot_size, i);
    struct conn_snap *cs = &ps->c[ps->nc];
    if (!r2s_statslot_read(s, &cs->id, &cs->ctr, READ_TRIES)) {
      ps->busy++;
      continue;
    }
    if (cs->id.f.state == R2S_SLOT_FREE) continue;
    cs->id.f.reason[sizeof cs->id.f.reason - 1] = '\0';
    cs->slot = i;
    for (int p = 0; p < R2S_STATSEG_PATHS; p++) {
      cs->tx += cs->ctr.tx[p];
      cs->rx += cs->ctr.rx[p];
      ps->bytes[DIR_TX][p] += cs->ctr.tx[p];
      ps->bytes[DIR_RX][p] += cs->ctr.rx[p];
    }
    if (cs->id.f.state == R2S_SLOT_LISTEN)
      ps->listeners++;
    else if (cs->id.f.path < R2S_STATSEG_PATHS)
      ps->by_path[cs->id.f.path]++;
    ps->nc++;
  }
}

/* Reads the segment of pid into *ps. Returns 1 if read, 2 if it belongs to
 * another user (mode 0600: only root reads everyone's), 0 to skip (with a
 * note on stderr when the segment is unreadable), -1 if the process is gone
 * (the segment is then removed, if we may). */
static int read_segment(const char *dir, const char *name, int pid, struct proc_snap *ps)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint64_t live_ticks = proc_start_ticks(pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == EACCES) return 2;
  if (fd < 0) return errno == ENOENT ? 0 : (fprintf(stderr, "r2sock-stat: %s: %s\n", path, strerror(errno)), 0);
  struct stat st;
  if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(r2s_statseg_hdr_t)) {
    close(fd);
    if (!live_ticks) goto gone; /* died while making it */
    return 0;                   /* being made */
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return 0;
  const r2s_statseg_hdr_t *h = m;
  int rc = 0;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != R2S_STATSEG_MAGIC) {
    if (!live_ticks) goto unmap_gone;
    goto unmap; /* being made */
  }
  if (h->pid != pid || !live_ticks || (h->start_ticks && h->start_ticks != live_ticks)) goto unmap_gone;
  if (h->layout != R2S_STATSEG_LAYOUT) {
    fprintf(stderr, "r2sock-stat: pid %d: segment layout %u, this r2sock-stat reads layout %u: skipped\n", pid,
            h->layout, R2S_STATSEG_LAYOUT);
    goto unmap;
  }
  if (h->header_size < sizeof *h || h->slot_size < sizeof(r2s_statslot_t) ||
      (uint64_t)h->header_size + (uint64_t)h->slot_size * h->nslots > (uint64_t)st.st_size) {
    fprintf(stderr, "r2sock-stat: pid %d: segment sizes do not add up (%u + %u x %u > %lld bytes): skipped\n", pid,
            h->header_size, h->slot_size, h->nslots, (long long)st.st_size);
    goto unmap;
  }
  ps->pid = pid;
  ps->start_ticks = h->start_ticks;
  ps->started_unix_ns = h->started_unix_ns;
  memcpy(ps->program, h->program, sizeof h->program);
  ps->program[sizeof h->program] = '\0';
  read_slots(h, ps);
  read_stats(h, ps);
  /* Connections that ended were folded into the process counters. */
  for (int p = 0; p < R2S_STATSEG_PATHS; p++) {
    char counter[32];
    snprintf(counter, sizeof counter, "bytes_%s_tx", path_names[p]);
    ps->bytes[DIR_TX][p] += proc_stat(ps, counter);
    snprintf(counter, sizeof counter, "bytes_%s_rx", path_names[p]);
    ps->bytes[DIR_RX][p] += proc_stat(ps, counter);
    ps->tx += ps->bytes[DIR_TX][p];
    ps->rx += ps->bytes[DIR_RX][p];
  }
  ps->waits = proc_stat(ps, "waits_sleep");
  ps->overflow = __atomic_load_n(&h->overflow, __ATOMIC_RELAXED);
  rc = 1;
unmap:
  munmap(m, (size_t)st.st_size);
  return rc;
unmap_gone:
  munmap(m, (size_t)st.st_size);
gone:
  /* Another user's leftover may not be ours to remove: then it stays. */
  (void)unlink(path);
  return -1;
}

static int by_pid(const void *a, const void *b)
{
  return ((const struct proc_snap *)a)->pid - ((const struct proc_snap *)b)->pid;
}

static void free_snapshot(struct snapshot *s)
{
  for (unsigned i = 0; i < s->np; i++) free(s->p[i].c);
  free(s->p);
  s->p = NULL;
  s->np = 0;
}

static int take_snapshot(const struct opts *o, struct snapshot *s)
{
  s->t = now_s();
  s->p = NULL;
  s->np = s->hidden = 0;
  DIR *d = opendir(R2S_STATSEG_DIR);
  if (!d) {
    fprintf(stderr, "r2sock-stat: %s: %s\n", R2S_STATSEG_DIR, strerror(errno));
    return -1;
  }
  unsigned cap = 0;
  struct dirent *e;
  const size_t plen = strlen(R2S_STATSEG_PREFIX);
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, R2S_STATSEG_PREFIX, plen) != 0) continue;
    char *end;
    long pid = strtol(e->d_name + plen, &end, 10);
    if (*end || pid <= 0 || pid > INT32_MAX) continue;
    if (o->pid && pid != o->pid) continue;
    if (s->np == cap) {
      cap = cap ? 2 * cap : 16;
      struct proc_snap *np = realloc(s->p, cap * sizeof *np);
      if (!np) break;
      s->p = np;
    }
    memset(&s->p[s->np], 0, sizeof s->p[0]);
    int rc = read_segment(R2S_STATSEG_DIR, e->d_name, (int)pid, &s->p[s->np]);
    if (rc == 1) s->np++;
    if (rc == 2) s->hidden++;
  }
  closedir(d);
  if (s->np) qsort(s->p, s->np, sizeof *s->p, by_pid);
  return 0;
}

static const struct proc_snap *find_proc(const struct snapshot *s, const struct proc_snap *p)
{
  for (unsigned i = 0; s && i < s->np; i++)
    if (s->p[i].pid == p->pid && s->p[i].start_ticks == p->start_ticks) return &s->p[i];
  return NULL;
}

static const struct conn_snap *find_conn(const struct proc_snap *p, const struct conn_snap *c)
{
  for (unsigned i = 0; p && i < p->nc; i++)
    if (p->c[i].slot == c->slot && p->c[i].id.f.conn_id == c->id.f.conn_id &&
        p->c[i].id.f.opened_unix_ns == c->id.f.opened_unix_ns)
      return &p->c[i];
  return NULL;
}

/* Bytes, or a rate, for people: 1023, 1.5K, 20.3M ... */
static const char *human(double v, char *buf, size_t len)
{
  static const char units[] = " KMGTP";
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, u++;
  if (u == 0)
    snprintf(buf, len, "%.0f", v);
  else
    snprintf(buf, len, "%.*f%c", v < 10 ? 2 : 1, v, units[u]);
  return buf;
}

/* A byte count: exact with --once (for scripts), else for people. */
static const char *bytes_str(const struct opts *o, uint64_t v, char *buf, size_t len)
{
  if (o->once) {
    snprintf(buf, len, "%" PRIu64, v);
    return buf;
  }
  return human((double)v, buf, len);
}

/* Rate from the previous reading, "-" without one (or after a restart). */
static const char *rate_str(bool have, uint64_t now, uint64_t before, double dt, char *buf, size_t len)
{
  if (!have || dt <= 0 || now < before) return "-";
  human((double)(now - before) / dt, buf, len);
  size_t n = strlen(buf);
  snprintf(buf + n, len - n, "/s");
  return buf;
}

static const char *addr_str(const r2s_stat_addr_t *a, char *buf, size_t len)
{
  char host[INET6_ADDRSTRLEN];
  if (a->family == AF_INET && inet_ntop(AF_INET, a->addr, host, sizeof host))
    snprintf(buf, len, "%s:%u", host, a->port);
  else if (a->family == AF_INET6 && inet_ntop(AF_INET6, a->addr, host, sizeof host))
    snprintf(buf, len, "[%s]:%u", host, a->port);
  else
    snprintf(buf, len, "*");
  return buf;
}

static const char *path_str(const r2s_statslot_id_t *id, char *buf, size_t len)
{
  const char *tx = id->f.path_tx < R2S_STATSEG_PATHS ? path_names[id->f.path_tx] : "?";
  const char *rx = id->f.path_rx < R2S_STATSEG_PATHS ? path_names[id->f.path_rx] : "?";
  const char *path = id->f.path < R2S_STATSEG_PATHS ? path_names[id->f.path] : "?";
  if (id->f.state == R2S_SLOT_LISTEN)
    snprintf(buf, len, "listen");
  else if (id->f.path_tx != id->f.path_rx && id->f.path_rx == 0)
    snprintf(buf, len, "%s(tx)", tx); /* only the sending direction is in a ring so far */
  else if (id->f.path_tx != id->f.path_rx && id->f.path_tx == 0)
    snprintf(buf, len, "%s(rx)", rx);
  else if (id->f.path_tx != id->f.path_rx)
    snprintf(buf, len, "tx:%s,rx:%s", tx, rx);
  else if (id->f.reason[0])
    snprintf(buf, len, "%s(%s)", path, id->f.reason);
  else
    snprintf(buf, len, "%s", path);
  return buf;
}

static void print_processes(const struct opts *o, const struct snapshot *s, const struct snapshot *prev)
{
  char b[6][32];
  printf("%7s %-16s %5s %5s %5s %5s %6s %10s %10s %11s %11s %8s\n", "PID", "PROGRAM", "CONNS", "TCP", "SHM", "RDMA",
         "LISTEN", "SENT", "RECV", "TX", "RX", "WAITS");
  for (unsigned i = 0; i < s->np; i++) {
    const struct proc_snap *p = &s->p[i], *q = find_proc(prev, p);
    double dt = prev ? s->t - prev->t : 0;
    unsigned n = p->by_path[0] + p->by_path[1] + p->by_path[2];
    printf("%7d %-16s %5u %5u %5u %5u %6u %10s %10s %11s %11s %8" PRIu64 "\n", p->pid, p->program, n, p->by_path[0],
           p->by_path[1], p->by_path[2], p->listeners, bytes_str(o, p->tx, b[0], sizeof b[0]),
           bytes_str(o, p->rx, b[1], sizeof b[1]), rate_str(q, p->tx, q ? q->tx : 0, dt, b[2], sizeof b[2]),
           rate_str(q, p->rx, q ? q->rx : 0, dt, b[3], sizeof b[3]), p->waits);
    if (p->overflow) printf("%7s (%" PRIu64 " connections found no slot and are not listed)\n", "", p->overflow);
  }
}

static void print_connections(const struct opts *o, const struct snapshot *s, const struct snapshot *prev)
{
  char l[64], r[64], path[48], b[4][32];
  printf("%7s %5s %-24s    %-24s %-22s %10s %10s %11s %11s %6s\n", "PID", "FD", "LOCAL", "PEER", "PATH", "SENT", "RECV",
         "TX", "RX", "WAITS");
  for (unsigned i = 0; i < s->np; i++) {
    const struct proc_snap *p = &s->p[i], *q = find_proc(prev, p);
    double dt = prev ? s->t - prev->t : 0;
    for (unsigned k = 0; k < p->nc; k++) {
      const struct conn_snap *c = &p->c[k], *d = find_conn(q, c);
      printf("%7d %5d %-24s -> %-24s %-22s %10s %10s %11s %11s %6" PRIu64 "\n", p->pid, c->id.f.fd,
             addr_str(&c->id.f.local, l, sizeof l), addr_str(&c->id.f.peer, r, sizeof r),
             path_str(&c->id, path, sizeof path), bytes_str(o, c->tx, b[0], sizeof b[0]),
             bytes_str(o, c->rx, b[1], sizeof b[1]), rate_str(d, c->tx, d ? d->tx : 0, dt, b[2], sizeof b[2]),
             rate_str(d, c->rx, d ? d->rx : 0, dt, b[3], sizeof b[3]), c->ctr.waits);
    }
    if (p->overflow) printf("%7d (%" PRIu64 " connections found no slot and are not listed)\n", p->pid, p->overflow);
    if (p->busy) printf("%7d (%u slots changed too fast to read)\n", p->pid, p->busy);
  }
}

static void usage(FILE *f)
{
  fprintf(f, "usage: r2sock-stat [-d SECS] [-n COUNT] [-p PID] [--once] [-c|--connections] [--json|--prometheus]\n"
             "  Shows the processes running under r2sock (those with a segment in " R2S_STATSEG_DIR
             "),\n"
             "  refreshed every SECS (default 1) seconds, COUNT times (default: until interrupted).\n"
             "  -c, --connections  one line per connection: addresses, path (or why it is on TCP), bytes, rates\n"
             "  -p PID             only this process\n"
             "  --once             one snapshot, not cleared, exact byte counts (for scripts)\n"
             "  --json             one snapshot as a JSON document: every process with its exact counters\n"
             "                     and its live connections\n"
             "  --prometheus       one snapshot in the Prometheus text format 0.0.4 (node_exporter's\n"
             "                     textfile collector), labelled with pid and program\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
  static const struct option longopts[] = {
      {"delay", required_argument, NULL, 'd'}, {"count", required_argument, NULL, 'n'},
      {"pid", required_argument, NULL, 'p'},   {"once", no_argument, NULL, '1'},
      {"connections", no_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
      {"json", no_argument, NULL, 'j'},        {"prometheus", no_argument, NULL, 'P'},
      {NULL, 0, NULL, 0},
  };
  *o = (struct opts){.delay = 1, .count = -1};
  int ch;
  char *end;
  while ((ch = getopt_long(argc, argv, "d:n:p:ch", longopts, NULL)) != -1) {
    switch (ch) {
    case 'd':
      o->delay = strtod(optarg, &end);
      if (*end || !(o->delay >= 0.05 && o->delay <= 3600)) {
        fprintf(stderr, "r2sock-stat: -d takes seconds between 0.05 and 3600, not '%s'\n", optarg);
        exit(2);
      }
      break;
    case 'n':
      o->count = strtol(optarg, &end, 10);
      if (*end || o->count < 1) {
        fprintf(stderr, "r2sock-stat: -n takes a count of at least 1, not '%s'\n", optarg);
        exit(2);
      }
      break;
    case 'p':
      o->pid = (int)strtol(optarg, &end, 10);
      if (*end || o->pid <= 0) {
        fprintf(stderr, "r2sock-stat: -p takes a process id, not '%s'\n", optarg);
        exit(2);
      }
      break;
    case '1': o->once = true; break;
    case 'c': o->conns = true; break;
    case 'j':
    case 'P':
      if (o->report != REPORT_TEXT && o->report != (ch == 'j' ? REPORT_JSON : REPORT_PROMETHEUS)) {
        fprintf(stderr, "r2sock-stat: --json and --prometheus exclude each other\n");
        exit(2);
      }
      o->report = ch == 'j' ? REPORT_JSON : REPORT_PROMETHEUS;
      break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
  }
  if (optind < argc) {
    usage(stderr);
    exit(2);
  }
  /* A machine-readable report is one snapshot, with exact counts. */
  if (o->report != REPORT_TEXT) o->once = true;
  if (o->once) o->count = 1;
}

/* With --once and -p: the process has no segment (any more). Says so. */
static bool pid_missing(const struct opts *o, const struct snapshot *s)
{
  if (!o->once || !o->pid || s->np) return false;
  fprintf(stderr, "r2sock-stat: no live statistics for pid %d (not running, not under r2sock, no TCP "
                  "socket yet, R2SOCK_STATSEG=0%s)\n",
          o->pid, s->hidden ? ", or another user's process" : "");
  return true;
}

/* --json, --prometheus: one snapshot. The document is printed even when -p
 * names no process (it is then empty), so that what reads it can parse it. */
static int report(const struct opts *o)
{
  struct snapshot s;
  if (take_snapshot(o, &s) < 0) return 1;
  if (o->report == REPORT_JSON)
    print_json(&s);
  else
    print_prometheus(&s);
  int rc = pid_missing(o, &s) ? 1 : 0;
  free_snapshot(&s);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "r2sock-stat: writing the report: %s\n", strerror(errno));
    return 1;
  }
  return rc;
}

int main(int argc, char **argv)
{
  struct opts o;
  parse(argc, argv, &o);
  if (o.report != REPORT_TEXT) return report(&o);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  struct snapshot prev = {0}, cur;
  bool have_prev = false;
  for (long n = 0; !stop && (o.count < 0 || n < o.count); n++) {
    if (n > 0) {
      struct timespec ts = {(time_t)o.delay, (long)((o.delay - (time_t)o.delay) * 1e9)};
      while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stop) {
      }
      if (stop) break;
    }
    if (take_snapshot(&o, &cur) < 0) return 1;
    if (pid_missing(&o, &cur)) {
      free_snapshot(&cur);
      return 1;
    }
    if (!o.once) {
      char when[32];
      time_t t = time(NULL);
      strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
      printf("\033[H\033[2J");
      printf("r2sock-stat %s: %u process%s under r2sock, every %gs (Ctrl-C quits)", when, cur.np,
             cur.np == 1 ? "" : "es", o.delay);
      if (cur.hidden) printf("; %u of other users not shown (root sees them)", cur.hidden);
      printf("\n\n");
    }
    if (o.conns)
      print_connections(&o, &cur, have_prev ? &prev : NULL);
    else
      print_processes(&o, &cur, have_prev ? &prev : NULL);
    fflush(stdout);
    if (have_prev) free_snapshot(&prev);
    prev = cur;
    have_prev = true;
  }
  if (have_prev) free_snapshot(&prev);
  return 0;
}

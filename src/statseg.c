/* The live-statistics segment: made on first use, one slot per connection,
 * identities published under each slot's seqlock. */
#include "statseg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "libc.h"
#include "link.h"
#include "log.h"
#include "options.h"
#include "proc.h"
#include "sandbox.h"
#include "stats.h"

_Static_assert(R2S_STAT_COUNT <= R2S_STATSEG_MAX_STATS, "the header has room for every counter");
_Static_assert(sizeof(r2s_stats_t) == sizeof(uint64_t) * R2S_STAT_COUNT, "counters are bare words");

/* seg_lock guards the segment's creation and the free-slot stack; it is
 * taken when a connection opens or ends, never on the data path. */
static pthread_mutex_t seg_lock = PTHREAD_MUTEX_INITIALIZER;
static r2s_statseg_hdr_t *seg; /* NULL: not made (yet) */
static bool seg_failed;        /* making it failed once: do not retry per connection */
static char seg_name[64];
static uint16_t free_slots[R2S_STATSEG_SLOTS];
static unsigned nfree;
static uint64_t reserved; /* bytes of the segment backed by allocated memory */

/* Writing to a page of a full tmpfs would raise SIGBUS in the application,
 * so the pages a slot lives on are allocated (posix_fallocate) before the
 * slot is handed out, 64 KiB at a time rather than all 788 KiB at once.
 * seg_lock held. */
#define RESERVE_STEP (64u << 10)
static int reserve_through(uint64_t end)
{
  if (end <= reserved) return 0;
  if (r2s__sandboxed()) return -EPERM; /* no open(2) there: the slot goes unlisted */
  uint64_t to = (end + RESERVE_STEP - 1) / RESERVE_STEP * RESERVE_STEP;
  if (to > R2S_STATSEG_SIZE) to = R2S_STATSEG_SIZE;
  int fd = r2s__open_raw(seg_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return -errno;
  int rc = posix_fallocate(fd, (off_t)reserved, (off_t)(to - reserved));
  r2s__libc.close(fd);
  if (rc != 0) return -rc;
  reserved = to;
  return 0;
}

static void make_name(char *buf, size_t len, int pid)
{
  snprintf(buf, len, R2S_STATSEG_DIR "/" R2S_STATSEG_PREFIX "%d", pid);
}

/* Field 22 of /proc/self/stat: the start time that, with the pid, names this
 * process for good (a reader tells a recycled pid by it). 0 if unreadable. */
static uint64_t start_ticks(void)
{
  char buf[1024];
  const char *f = r2s__proc_stat(0, buf, sizeof buf);
  unsigned long long v = 0;
  if (!f || sscanf(f, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &v) != 1)
    return 0;
  return v;
}

/* Segments of processes that died without their destructor (killed): the
 * processes that live on remove them, when they make their own segment and
 * when they exit, as r2sock-stat does when it reads. */
static void sweep_dead(void)
{
  DIR *d = opendir(R2S_STATSEG_DIR);
  if (!d) return;
  const size_t plen = strlen(R2S_STATSEG_PREFIX);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, R2S_STATSEG_PREFIX, plen) != 0) continue;
    char *end;
    long pid = strtol(e->d_name + plen, &end, 10);
    if (*end || pid <= 0 || pid > INT32_MAX || pid == getpid()) continue;
    if (!r2s__proc_gone((int)pid)) continue;
    char name[64];
    make_name(name, sizeof name, (int)pid);
    (void)unlink(name);
  }
  closedir(d);
}


static int64_t unix_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fill_header(r2s_statseg_hdr_t *h)
{
  h->layout = R2S_STATSEG_LAYOUT;
  h->header_size = R2S_STATSEG_HDR_SIZE;
  h->slot_size = R2S_STATSEG_SLOT_SIZE;
  h->nslots = R2S_STATSEG_SLOTS;
  h->pid = (int)getpid();
  h->nstats = R2S_STAT_COUNT;
  h->start_ticks = start_ticks();
  h->started_unix_ns = unix_ns();
  snprintf(h->program, sizeof h->program, "%s", program_invocation_short_name);
  size_t n = 0;
  for (int i = 0; i < R2S_STAT_COUNT && n < sizeof h->stat_names; i++)
    n += (size_t)snprintf(h->stat_names + n, sizeof h->stat_names - n, "%s%s", i ? " " : "",
                          r2s__stat_name((r2s_stat_id_t)i));
}

/* Makes the segment; seg_lock held. */
static int create_segment(void)
{
  char name[64];
  make_name(name, sizeof name, (int)getpid());
  /* A name under our own pid can only be a leftover of this process's
   * earlier image (before an exec) or of a dead process whose pid we got. */
  (void)unlink(name);
  int fd = r2s__open_raw(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -errno;
  int rc = 0;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)R2S_STATSEG_SIZE) < 0) {
    rc = -errno;
    goto err_unlink;
  }
  rc = -posix_fallocate(fd, 0, R2S_STATSEG_HDR_SIZE);
  if (rc < 0) goto err_unlink;
  reserved = R2S_STATSEG_HDR_SIZE;
  p = r2s__mmap_fd_raw(R2S_STATSEG_SIZE, fd);
  if (p == MAP_FAILED) {
    rc = -errno;
    goto err_unlink;
  }
  r2s__libc.close(fd);
  r2s_statseg_hdr_t *h = p;
  fill_header(h);
  nfree = 0;
  for (int i = R2S_STATSEG_SLOTS - 1; i >= 0; i--) free_slots[nfree++] = (uint16_t)i;
  r2s__stats_move((r2s_stats_t *)h->stats);
  __atomic_store_n(&h->magic, R2S_STATSEG_MAGIC, __ATOMIC_RELEASE);
  memcpy(seg_name, name, sizeof seg_name);
  seg = h;
  sweep_dead();
  return 0;
err_unlink:
  unlink(name);
  r2s__libc.close(fd);
  return rc;
}

/* Adds every counter of *from to *to and zeroes it, each word atomically.
 * Called inside a slot's write section: release order, so a reader that
 * sees the new values (or later data-path adds, which continue the release
 * sequence) also sees the odd seq. */
static void move_counts(r2s_stat_ctr_t *to, r2s_stat_ctr_t *from)
{
  uint64_t *t = (uint64_t *)to, *f = (uint64_t *)from;
  for (size_t i = 0; i < sizeof *to / sizeof *t; i++)
    __atomic_fetch_add(&t[i], __atomic_exchange_n(&f[i], 0, __ATOMIC_ACQ_REL), __ATOMIC_RELEASE);
}

static r2s_statslot_t *slot_of(int i)
{
  return r2s_statseg_slot(seg, R2S_STATSEG_HDR_SIZE, R2S_STATSEG_SLOT_SIZE, (uint32_t)i);
}

static void copy_addr(r2s_stat_addr_t *out, const struct sockaddr_storage *ss)
{
  memset(out, 0, sizeof *out);
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    out->family = AF_INET;
    out->port = ntohs(a->sin_port);
    memcpy(out->addr, &a->sin_addr, 4);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    out->family = AF_INET6;
    out->port = ntohs(a->sin6_port);
    memcpy(out->addr, &a->sin6_addr, 16);
  }
}

/* Reason code for a connection still negotiating: its link may yet switch
 * or settle, and its reason fields belong to the threads doing its I/O. */
#define REASON_NEGOTIATING R2S_REASON_COUNT

/* What the slot should say about c's path now, packed for comparison with
 * what was published: path | tx << 4 | rx << 8 | reason << 12. Sets *settled
 * when it can no longer change by itself. */
static uint32_t path_state(const r2s_conn_t *c, bool *settled)
{
  const r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  uint32_t path = (uint32_t)r2s__conn_path(c);
  int tx = R2S_PATH_TCP, rx = R2S_PATH_TCP;
  if (l) r2s__link_info(l, &rx, &tx, NULL);
  bool plain = !l || r2s__link_passthrough(l);
  *settled = plain || (tx != R2S_PATH_TCP && rx != R2S_PATH_TCP);
  uint32_t why = R2S_REASON_NONE;
  /* A passthrough link's reason no longer changes (the flag was set after
   * it, with release order); an undecided one's is being written. */
  if (path == R2S_PATH_TCP) why = plain ? (uint32_t)r2s__conn_reason(c) : REASON_NEGOTIATING;
  return path | (uint32_t)tx << 4 | (uint32_t)rx << 8 | why << 12;
}

/* Writes c's identity into its slot. try: give up if another writer of the
 * slot is busy (a later I/O will try again); it is also a republication,
 * which keeps the time the slot was opened. */
static void publish(r2s_conn_t *c, int slot, bool try)
{
  bool settled;
  uint32_t ps = path_state(c, &settled);
  r2s_statslot_id_t id;
  memset(&id, 0, sizeof id);
  int role = __atomic_load_n(&c->role, __ATOMIC_ACQUIRE);
  id.f.state = role == R2S_ROLE_LISTENER ? R2S_SLOT_LISTEN : R2S_SLOT_OPEN;
  id.f.conn_id = c->id;
  id.f.fd = c->fd_hint;
  id.f.role = (uint32_t)role;
  id.f.path = ps & 0xf;
  id.f.path_tx = ps >> 4 & 0xf;
  id.f.path_rx = ps >> 8 & 0xf;
  if (!try) id.f.opened_unix_ns = unix_ns();
  copy_addr(&id.f.local, &c->local);
  copy_addr(&id.f.peer, &c->peer);
  uint32_t why = ps >> 12;
  snprintf(id.f.reason, sizeof id.f.reason, "%s",
           why == REASON_NEGOTIATING ? "negotiating" : r2s__reason_name((r2s_reason_t)why));
  r2s_statslot_t *s = slot_of(slot);
  if (!r2s_statslot_begin(s, try)) return;
  if (try) id.f.opened_unix_ns = __atomic_load_n(&s->id.f.opened_unix_ns, __ATOMIC_RELAXED);
  r2s_statslot_store_id(s, &id);
  r2s_statslot_end(s);
  __atomic_store_n(&c->stat_pub, ps, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stat_settled, settled, __ATOMIC_RELAXED);
}

void r2s__statseg_init(void)
{
  if (!r2s__opt.statseg) return;
  /* After exec the pid stays and the old image's segment with it; its
   * connections are not ours to show. */
  char name[64];
  make_name(name, sizeof name, (int)getpid());
  (void)unlink(name);
}

void r2s__statseg_open(r2s_conn_t *c)
{
  if (!r2s__opt.statseg || __atomic_load_n(&c->stat_slot, __ATOMIC_RELAXED) >= 0) return;
  __atomic_store_n(&c->stat_settled, 1, __ATOMIC_RELAXED); /* unless publish says otherwise */
  pthread_mutex_lock(&seg_lock);
  /* A sandboxed process (sandbox.h) makes no file: its connections are
   * not listed. */
  if (!seg && !seg_failed && !r2s__sandboxed()) {
    int rc = create_segment();
    if (rc < 0) {
      seg_failed = true;
      r2s__warn("no live-statistics segment (%s): r2sock-stat will not list this process", strerror(-rc));
    }
  }
  int i = -1;
  if (seg && nfree > 0) {
    i = free_slots[nfree - 1];
    if (reserve_through(R2S_STATSEG_HDR_SIZE + (uint64_t)(i + 1) * R2S_STATSEG_SLOT_SIZE) == 0)
      nfree--;
    else
      i = -1; /* no memory for its page: not listed, like the 4097th */
  }
  if (seg && i < 0) __atomic_fetch_add(&seg->overflow, 1, __ATOMIC_RELAXED);
  if (seg && i >= 0 && (uint32_t)i >= __atomic_load_n(&seg->slots_hwm, __ATOMIC_RELAXED))
    __atomic_store_n(&seg->slots_hwm, (uint32_t)i + 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&seg_lock);
  if (i < 0) return;
  r2s_statslot_t *s = slot_of(i);
  /* The slot's counters (zero: a freed slot is left so) start from what the
   * connection counted so far. */
  r2s_statslot_begin(s, false);
  move_counts(&s->ctr, &c->own);
  r2s_statslot_end(s);
  __atomic_store_n(&c->ctr, &s->ctr, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stat_slot, i, __ATOMIC_RELAXED);
  publish(c, i, false);
}

void r2s__statseg_refresh(r2s_conn_t *c)
{
  int i = __atomic_load_n(&c->stat_slot, __ATOMIC_RELAXED);
  if (i < 0) {
    /* Inherited through fork (see conn.c): published on first use. */
    if (r2s__conn_flags(c) & R2S_CONN_ESTABLISHED)
      r2s__statseg_open(c);
    else
      __atomic_store_n(&c->stat_settled, 1, __ATOMIC_RELAXED);
    return;
  }
  bool settled;
  if (path_state(c, &settled) != __atomic_load_n(&c->stat_pub, __ATOMIC_RELAXED))
    publish(c, i, true);
  else if (settled)
    __atomic_store_n(&c->stat_settled, 1, __ATOMIC_RELAXED);
}

void r2s__statseg_close(r2s_conn_t *c)
{
  int i = __atomic_load_n(&c->stat_slot, __ATOMIC_RELAXED);
  if (i < 0) return;
  r2s_statslot_t *s = slot_of(i);
  /* The caller folded the counters; whatever is left (nothing, unless a
   * caller folds first and closes later) moves to the connection's own. */
  r2s_statslot_begin(s, false);
  move_counts(&c->own, &s->ctr);
  r2s_statslot_id_t id;
  memset(&id, 0, sizeof id);
  r2s_statslot_store_id(s, &id);
  r2s_statslot_end(s);
  __atomic_store_n(&c->ctr, &c->own, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stat_slot, -1, __ATOMIC_RELAXED);
  __atomic_store_n(&c->stat_settled, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&seg_lock);
  if (seg) free_slots[nfree++] = (uint16_t)i;
  pthread_mutex_unlock(&seg_lock);
}

pthread_mutex_t *r2s__statseg_lock(void)
{
  return &seg_lock;
}

void r2s__statseg_fork_prepare(void)
{
  pthread_mutex_lock(&seg_lock);
}

void r2s__statseg_fork_parent(void)
{
  pthread_mutex_unlock(&seg_lock);
}

void r2s__statseg_fork_child(void)
{
  /* The segment is the parent's, and so is the mapping. The caller resets
   * the process counters to process memory next, and conn.c's handler points
   * every connection back to its own counters before anything can use them. */
  if (seg) munmap(seg, R2S_STATSEG_SIZE);
  seg = NULL;
  seg_failed = false;
  seg_name[0] = '\0';
  nfree = 0;
  reserved = 0;
  pthread_mutex_unlock(&seg_lock);
}

void r2s__statseg_sandbox(void)
{
  pthread_mutex_lock(&seg_lock);
  /* Gone from the directory now, while unlink(2) may still be called; the
   * mapping stays, so the counting goes on unseen. */
  if (seg && seg_name[0]) unlink(seg_name);
  seg_name[0] = '\0';
  pthread_mutex_unlock(&seg_lock);
}

void r2s__statseg_exit(void)
{
  pthread_mutex_lock(&seg_lock);
  /* The mapping stays: other threads and later destructors may still count. */
  /* A sandboxed process unlinked its name on the way in and may make no
   * call now (r2s__statseg_sandbox). */
  if (seg && seg_name[0] && !r2s__sandboxed()) {
    unlink(seg_name);
    sweep_dead();
  }
  seg_name[0] = '\0';
  /* A thread that opens a connection after this must not make a segment
   * that no destructor would remove. */
  seg_failed = true;
  pthread_mutex_unlock(&seg_lock);
}

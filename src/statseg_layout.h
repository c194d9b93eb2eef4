/*
 * statseg_layout.h - the bytes of a live-statistics segment, shared by the
 * shim (writer, src/statseg.c) and r2sock-stat (reader, tools/).
 *
 * Contract:
 *  - One segment per process, /dev/shm/r2s-stat-<pid> (R2S_STATSEG_PREFIX),
 *    mode 0600: a header, then R2S_STATSEG_SLOTS connection slots of
 *    R2S_STATSEG_SLOT_SIZE bytes. The reader takes the slot count and sizes
 *    from the header; a segment whose magic or layout differs from its own
 *    is reported and skipped, never guessed at.
 *  - The header's magic is stored last, with release order: a reader that
 *    sees it sees a complete header. The process counters (stats[]) are
 *    named by stat_names, so counters can be added without a new layout.
 *  - Each slot's identity (what connection it is: fd, addresses, path,
 *    reason) is guarded by a sequence counter, seq: odd while a writer is
 *    changing it. Writers take the slot by moving seq from even to odd with a
 *    compare-and-swap (so seq is also their lock), store the words with
 *    relaxed atomics, and release it at seq + 2. Readers copy the slot and
 *    accept the copy only if seq was even and unchanged around it
 *    (r2s_statslot_read), retrying a bounded number of times.
 *  - The counters (bytes per path, waits) are the connection's own: the data
 *    path adds to them with one relaxed atomic add each, outside the seqlock.
 *    Each is monotonic while the slot keeps the same identity; a change of
 *    identity (slot reuse) moves seq and writes the counters with release
 *    order inside the write section (the data path's adds then continue that
 *    release sequence), so a reader never pairs one connection's counters
 *    with another's identity.
 *  - Everything in a slot is read and written with atomic word accesses, so
 *    the torn states a seqlock tolerates are not data races (TSan-clean).
 */
#ifndef R2S_STATSEG_LAYOUT_H
#define R2S_STATSEG_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#define R2S_STATSEG_DIR "/dev/shm"
#define R2S_STATSEG_PREFIX "r2s-stat-" /* + decimal pid; distinct from the rings' "r2s-<pid>-" */
#define R2S_STATSEG_MAGIC 0x5441545353325232ull /* "R2SSTAT" + 'T', little-endian */
#define R2S_STATSEG_LAYOUT 1
#define R2S_STATSEG_SLOTS 4096
#define R2S_STATSEG_MAX_STATS 64
#define R2S_STATSEG_PATHS 3 /* tcp, shm, rdma: the order of r2s_path_t */

/* Slot states. */
enum { R2S_SLOT_FREE = 0, R2S_SLOT_OPEN = 1, R2S_SLOT_LISTEN = 2 };

/* The counters a connection updates on its data path. */
typedef struct r2s_stat_ctr_s {
  uint64_t tx[R2S_STATSEG_PATHS]; /* payload bytes sent, per path */
  uint64_t rx[R2S_STATSEG_PATHS]; /* payload bytes received, per path */
  uint64_t waits;                 /* blocking calls that slept in the kernel */
} r2s_stat_ctr_t;

typedef struct r2s_stat_addr_s {
  uint16_t family; /* AF_INET, AF_INET6, 0: unknown */
  uint16_t port;   /* host order */
  uint8_t addr[16];
} r2s_stat_addr_t;

/* What connection a slot describes; written only under the seqlock. */
typedef union r2s_statslot_id_u {
  struct {
    uint32_t state;   /* R2S_SLOT_* */
    uint32_t conn_id; /* process-unique, as in the shim's log lines */
    int32_t fd;       /* an fd that refers to it */
    uint32_t role;    /* 0 socket, 1 listener, 2 client, 3 server */
    uint32_t path;    /* the connection's path (upgraded once one direction is) */
    uint32_t path_tx, path_rx;
    uint32_t pad;
    int64_t opened_unix_ns;
    r2s_stat_addr_t local, peer;
    char reason[16]; /* why it is on TCP now, the shim's name for it; "" if upgraded */
  } f;
  uint64_t w[12];
} r2s_statslot_id_t;

typedef struct r2s_statslot_s {
  uint32_t seq;
  uint32_t pad;
  r2s_statslot_id_t id;
  char pad_to_counters[128 - 8 - sizeof(r2s_statslot_id_t)];
  /* Their own cache line: the data path of one connection never shares a
   * line with another connection's. */
  r2s_stat_ctr_t ctr;
  char pad_to_end[64 - sizeof(r2s_stat_ctr_t)];
} __attribute__((aligned(64))) r2s_statslot_t;

#define R2S_STATSEG_SLOT_SIZE 192

typedef struct r2s_statseg_hdr_s {
  uint64_t magic; /* stored last */
  uint32_t layout, header_size, slot_size, nslots;
  int32_t pid;
  uint32_t nstats;         /* entries of stats[] in use, named by stat_names */
  uint64_t start_ticks;    /* the process's start time in /proc/<pid>/stat: tells a recycled pid */
  int64_t started_unix_ns; /* when the segment was made */
  char program[32];
  uint32_t slots_hwm; /* atomic: slots at or above this index were never used */
  uint32_t overflow;  /* atomic: connections that found no free slot (not listed) */
  char stat_names[1024]; /* the counters' names, space-separated, in order */
  uint64_t stats[R2S_STATSEG_MAX_STATS]; /* the process counters (src/stats.h), relaxed atomics */
  char pad[2048 - 88 - 1024 - 8 * R2S_STATSEG_MAX_STATS];
} r2s_statseg_hdr_t;

#define R2S_STATSEG_HDR_SIZE 2048
#define R2S_STATSEG_SIZE (R2S_STATSEG_HDR_SIZE + (uint64_t)R2S_STATSEG_SLOTS * R2S_STATSEG_SLOT_SIZE)

_Static_assert(sizeof(r2s_statslot_id_t) == sizeof(((r2s_statslot_id_t *)0)->w), "id is whole words");
_Static_assert(sizeof(r2s_statslot_t) == R2S_STATSEG_SLOT_SIZE, "slot size is part of the layout");
_Static_assert(sizeof(r2s_statseg_hdr_t) == R2S_STATSEG_HDR_SIZE, "header size is part of the layout");

static inline r2s_statslot_t *r2s_statseg_slot(void *base, uint32_t header_size, uint32_t slot_size, uint32_t i)
{
  return (r2s_statslot_t *)((char *)base + header_size + (uint64_t)slot_size * i);
}

/* Writer side: takes the slot (seq even -> odd). With try, gives up at once
 * when another writer holds it; otherwise waits for it (writers of one slot
 * are rare and short). Returns false only when try gave up. */
static inline bool r2s_statslot_begin(r2s_statslot_t *s, bool try)
{
  for (;;) {
    uint32_t q = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    if (!(q & 1) && __atomic_compare_exchange_n(&s->seq, &q, q + 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return true;
    if (try) return false;
    __builtin_ia32_pause();
  }
}

/* Release stores: a reader that sees one also sees the odd seq before it.
 * (Rather than fences, which ThreadSanitizer does not model; on x86 both
 * are plain moves.) */
static inline void r2s_statslot_store_id(r2s_statslot_t *s, const r2s_statslot_id_t *id)
{
  for (unsigned i = 0; i < sizeof id->w / sizeof id->w[0]; i++)
    __atomic_store_n(&s->id.w[i], id->w[i], __ATOMIC_RELEASE);
}

static inline void r2s_statslot_end(r2s_statslot_t *s)
{
  __atomic_fetch_add(&s->seq, 1, __ATOMIC_RELEASE);
}

/* Reader side: a consistent copy of the slot's identity and counters, or
 * false if writers kept it busy for `tries` attempts. */
static inline bool r2s_statslot_read(const r2s_statslot_t *s, r2s_statslot_id_t *id, r2s_stat_ctr_t *ctr,
                                     unsigned tries)
{
  const uint64_t *cw = (const uint64_t *)&s->ctr;
  uint64_t *out = (uint64_t *)ctr;
  for (unsigned t = 0; t < tries; t++) {
    uint32_t q1 = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    if (q1 & 1) {
      __builtin_ia32_pause();
      continue;
    }
    /* Acquire loads: seq is looked at again only after the copies. */
    for (unsigned i = 0; i < sizeof id->w / sizeof id->w[0]; i++)
      id->w[i] = __atomic_load_n(&s->id.w[i], __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < sizeof *ctr / sizeof(uint64_t); i++) out[i] = __atomic_load_n(&cw[i], __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == q1) return true;
  }
  return false;
}

#endif

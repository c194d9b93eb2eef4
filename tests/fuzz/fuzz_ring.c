/*
 * fuzz_ring - libFuzzer target for the SPSC ring (src/ring.c) against a
 * lying peer.
 *
 * The ring's control page is shared with the other end, which may be
 * hostile: the input is a script (ring_script.h) of producer puts, consumer
 * gets and peeks, and the peer storing whatever it likes into the indices,
 * the sleeping/closed words and the data. Both ends' views live here on one
 * ring of 4096 bytes in a buffer of exactly r2s__ring_bytes(4096), so ASan
 * reports any access past the ring, and the iovecs are exact heap buffers.
 *
 * A reference model (the contract in ring.h, written independently of
 * ring.c's arithmetic) predicts every result:
 *  - an index from shared memory is legal iff head <= tail <= head + size
 *    and it did not move backwards; a legal one is adopted, an illegal one
 *    gives -EPROTO (the only error) and changes nothing;
 *  - put and get move exactly min(asked, iovecs, what the indices allow);
 *  - a get returns the bytes in memory at its position (a mirror of the data
 *    kept from every write the model knows of) and writes nothing past the
 *    count it returns; and while no lie has been told since the last clean
 *    attach, the bytes come out in the order they went in (a plain FIFO);
 *  - the sleeping and closed words are the wake-up protocol's, not the
 *    ring's: storing anything there must not change a single result.
 * After -EPROTO the contract lets that end do anything but touch memory it
 * does not own, so it is only held to the bounds from then on.
 *
 * R2S_FUZZ_TRACE=1 in the environment prints each operation, to read a
 * reproducer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "ring_script.h"

#define SIZE RS_RING_SIZE
#define MASK (SIZE - 1)

#define CHECK(c)                                                                   \
  do {                                                                             \
    if (!(c)) {                                                                    \
      fprintf(stderr, "fuzz_ring: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int trace;

#define TRACE(...)                                                                 \
  do {                                                                             \
    if (trace) fprintf(stderr, __VA_ARGS__);                                       \
  } while (0)

/* ---- reading the script ----------------------------------------------- */

typedef struct cursor_s {
  const uint8_t *p;
  size_t n, off;
} cursor_t;

static uint8_t rd8(cursor_t *c)
{
  return c->off < c->n ? c->p[c->off++] : 0;
}
static uint16_t rd16(cursor_t *c)
{
  uint16_t lo = rd8(c);
  return (uint16_t)(lo | rd8(c) << 8);
}
static uint32_t rd32(cursor_t *c)
{
  uint32_t lo = rd16(c);
  return lo | (uint32_t)rd16(c) << 16;
}
static uint64_t rd64(cursor_t *c)
{
  uint64_t lo = rd32(c);
  return lo | (uint64_t)rd32(c) << 32;
}

/* (int16)v widened with its sign, modulo 2^64: a small step either way. */
static uint64_t step16(uint64_t v)
{
  uint16_t u = (uint16_t)v;
  return u & 0x8000 ? (uint64_t)u - 0x10000u : (uint64_t)u;
}

static size_t min3(size_t a, size_t b, size_t c)
{
  size_t m = a < b ? a : b;
  return m < c ? m : c;
}

/* ---- the world -------------------------------------------------------- */

typedef struct view_s {
  uint64_t head, tail;
} view_t;

typedef struct world_s {
  uint8_t *mem; /* exactly r2s__ring_bytes(SIZE) */
  r2s_ring_ctl_t *ctl;
  uint8_t *data;
  r2s_ring_t p, c;  /* the code under test: producer's and consumer's views */
  int attached;     /* both views valid */
  view_t mp, mc;    /* the model's idea of p and c */
  int p_bad, c_bad; /* that end got -EPROTO: bounds only from now on */
  int lied;         /* a lie since the last clean attach: no FIFO check */
  uint8_t mirror[SIZE];
  uint8_t fifo[SIZE]; /* bytes put and not yet consumed, oldest first */
  size_t fifo_len;
  uint32_t gen; /* source of distinct payload bytes */
} world_t;

static uint64_t ld(const uint64_t *p)
{
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static void st(uint64_t *p, uint64_t v)
{
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static void check_views(world_t *w)
{
  if (!w->attached) return;
  if (!w->p_bad) {
    CHECK(w->p.head == w->mp.head && w->p.tail == w->mp.tail);
    CHECK(w->mp.tail - w->mp.head <= SIZE);
  }
  if (!w->c_bad) {
    CHECK(w->c.head == w->mc.head && w->c.tail == w->mc.tail);
    CHECK(w->mc.tail - w->mc.head <= SIZE);
  }
  if (!w->lied) {
    /* Honest ends: the consumer has seen no further than the producer
     * wrote, the producer no further than the consumer read, and what is in
     * flight fits the ring and is exactly the FIFO. */
    CHECK(w->mp.tail - w->mc.head <= SIZE);
    CHECK(w->mc.tail - w->mc.head <= w->mp.tail - w->mc.head);
    CHECK(w->mc.head - w->mp.head <= w->mp.tail - w->mp.head);
    CHECK(w->fifo_len == w->mp.tail - w->mc.head);
  }
}

/* Format, store the indices, attach both ends; the model follows. */
static void reattach(world_t *w, uint64_t head, uint64_t tail)
{
  r2s__ring_format(w->mem, SIZE);
  static const uint8_t zero[sizeof(r2s_ring_ctl_t)];
  CHECK(memcmp(w->ctl, zero, sizeof zero) == 0);
  st(&w->ctl->head, head);
  st(&w->ctl->tail, tail);
  int ok = tail - head <= SIZE;
  int rp = r2s__ring_attach(&w->p, w->mem, SIZE), rc = r2s__ring_attach(&w->c, w->mem, SIZE);
  CHECK(rp == (ok ? 0 : -EINVAL) && rc == rp);
  w->attached = ok;
  w->p_bad = w->c_bad = 0;
  w->mp.head = w->mc.head = head;
  w->mp.tail = w->mc.tail = tail;
  /* Bytes already between head and tail are whatever the memory holds:
   * not ours, so only a clean ring restarts the FIFO. */
  w->lied = tail != head;
  w->fifo_len = 0;
  memcpy(w->mirror, w->data, SIZE);
}

/* Exact heap buffers for each iovec, so a copy past one is an ASan report. */
typedef struct iovs_s {
  struct iovec v[RS_MAX_SEGS];
  int cnt;
  size_t total;
} iovs_t;

static void iovs_build(cursor_t *cur, iovs_t *io, size_t total, uint8_t segs)
{
  io->cnt = (segs & 7) % (RS_MAX_SEGS + 1);
  io->total = io->cnt ? total : 0;
  size_t left = io->total;
  for (int i = 0; i < io->cnt; i++) {
    size_t len = i == io->cnt - 1 ? left : rd16(cur) % (left + 1);
    left -= len;
    io->v[i].iov_len = len;
    if (len == 0 && (segs & RS_SEG_NULL)) {
      io->v[i].iov_base = NULL;
    } else {
      io->v[i].iov_base = malloc(len);
      CHECK(io->v[i].iov_base != NULL || len == 0);
    }
  }
}

static void iovs_free(iovs_t *io)
{
  for (int i = 0; i < io->cnt; i++) free(io->v[i].iov_base);
}

/* n bytes of the iovecs' contents from byte `skip` on, into out. */
static size_t iovs_flatten(const iovs_t *io, size_t skip, uint8_t *out, size_t n)
{
  size_t done = 0;
  for (int i = 0; i < io->cnt && done < n; i++) {
    size_t len = io->v[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    size_t k = len - skip < n - done ? len - skip : n - done;
    memcpy(out + done, (const uint8_t *)io->v[i].iov_base + skip, k);
    done += k;
    skip = 0;
  }
  return done;
}

/* ---- operations ------------------------------------------------------- */

static void op_put(world_t *w, cursor_t *cur)
{
  size_t total = rd16(cur) % RS_TOTAL_MOD;
  uint8_t segs = rd8(cur);
  size_t skip = rd16(cur);
  uint16_t m = rd16(cur);
  size_t max = m == RS_MAX_NOLIMIT ? SIZE_MAX : m;
  iovs_t io;
  iovs_build(cur, &io, total, segs);
  for (int i = 0; i < io.cnt; i++)
    for (size_t k = 0; k < io.v[i].iov_len; k++, w->gen++)
      ((uint8_t *)io.v[i].iov_base)[k] = (uint8_t)((w->gen * 2654435761u) >> 24);
  size_t offered = io.total > skip ? io.total - skip : 0;
  TRACE("put total=%zu segs=%d skip=%zu max=%zu\n", io.total, io.cnt, skip, max);
  if (!w->attached) goto out_free;

  uint64_t x = ld(&w->ctl->head), tail0 = w->p.tail;
  ssize_t ret = r2s__ring_put(&w->p, io.v, io.cnt, skip, max);
  TRACE("  ctl.head=%llu -> %zd\n", (unsigned long long)x, ret);
  CHECK(ret == -EPROTO || (ret >= 0 && (size_t)ret <= min3(max, offered, SIZE)));
  if (w->p_bad) {
    /* Whatever a broken end wrote stays inside the ring (ASan); take the
     * memory as it is now. */
    memcpy(w->mirror, w->data, SIZE);
    goto out_free;
  }
  /* The consumer's head may only have moved forward, up to our tail. */
  if (x - w->mp.head > w->mp.tail - w->mp.head) {
    CHECK(ret == -EPROTO);
    CHECK(w->p.tail == tail0);
    w->p_bad = w->lied = 1;
    goto out_free;
  }
  w->mp.head = x;
  size_t space = SIZE - (size_t)(w->mp.tail - x);
  CHECK(ret == (ssize_t)min3(max, offered, space));
  uint8_t *src = malloc((size_t)ret + 1);
  CHECK(src != NULL);
  CHECK(iovs_flatten(&io, skip, src, (size_t)ret) == (size_t)ret);
  for (size_t i = 0; i < (size_t)ret; i++) w->mirror[(w->mp.tail + i) & MASK] = src[i];
  if (!w->lied) {
    CHECK(w->fifo_len + (size_t)ret <= SIZE);
    memcpy(w->fifo + w->fifo_len, src, (size_t)ret);
    w->fifo_len += (size_t)ret;
  }
  free(src);
  w->mp.tail += (uint64_t)ret;
  if (ret > 0) CHECK(ld(&w->ctl->tail) == w->mp.tail);
  CHECK(memcmp(w->mirror, w->data, SIZE) == 0);
out_free:
  iovs_free(&io);
}

#define SENTINEL 0xe7

static void op_get(world_t *w, cursor_t *cur)
{
  size_t total = rd16(cur) % RS_TOTAL_MOD;
  uint8_t segs = rd8(cur);
  uint16_t m = rd16(cur);
  size_t max = m == RS_MAX_NOLIMIT ? SIZE_MAX : m;
  int peek = rd8(cur) & 1;
  iovs_t io;
  iovs_build(cur, &io, total, segs);
  for (int i = 0; i < io.cnt; i++)
    if (io.v[i].iov_len) memset(io.v[i].iov_base, SENTINEL, io.v[i].iov_len);
  TRACE("get total=%zu segs=%d max=%zu peek=%d\n", io.total, io.cnt, max, peek);
  if (!w->attached) goto out_free;

  uint64_t y = ld(&w->ctl->tail), head0 = w->c.head;
  ssize_t ret = r2s__ring_get(&w->c, io.v, io.cnt, max, peek);
  TRACE("  ctl.tail=%llu -> %zd\n", (unsigned long long)y, ret);
  CHECK(ret == -EPROTO || (ret >= 0 && (size_t)ret <= min3(max, io.total, SIZE)));
  /* Nothing is written past what is returned, broken end or not. */
  uint8_t *out = malloc(io.total + 1);
  CHECK(out != NULL);
  CHECK(iovs_flatten(&io, 0, out, io.total) == io.total);
  for (size_t i = ret > 0 ? (size_t)ret : 0; i < io.total; i++) CHECK(out[i] == SENTINEL);
  if (w->c_bad) goto out_out;
  /* The producer's tail may only have moved forward, at most a ring ahead
   * of what we consumed. */
  uint64_t d = y - w->mc.head;
  if (d > SIZE || d < w->mc.tail - w->mc.head) {
    CHECK(ret == -EPROTO);
    CHECK(w->c.head == head0);
    w->c_bad = w->lied = 1;
    goto out_out;
  }
  w->mc.tail = y;
  CHECK(ret == (ssize_t)min3(max, io.total, (size_t)d));
  for (size_t i = 0; i < (size_t)ret; i++) CHECK(out[i] == w->mirror[(w->mc.head + i) & MASK]);
  if (!w->lied) {
    CHECK((size_t)ret <= w->fifo_len);
    if (memcmp(out, w->fifo, (size_t)ret) != 0) {
      fprintf(stderr, "fuzz_ring: bytes out differ from bytes in, no lie told\n");
      abort();
    }
  }
  if (!peek) {
    w->mc.head += (uint64_t)ret;
    if (!w->lied) {
      memmove(w->fifo, w->fifo + ret, w->fifo_len - (size_t)ret);
      w->fifo_len -= (size_t)ret;
    }
    if (ret > 0) CHECK(ld(&w->ctl->head) == w->mc.head);
  }
out_out:
  free(out);
out_free:
  iovs_free(&io);
}

static void op_space(world_t *w)
{
  if (!w->attached) return;
  uint64_t x = ld(&w->ctl->head);
  ssize_t ret = r2s__ring_space(&w->p);
  TRACE("space ctl.head=%llu -> %zd\n", (unsigned long long)x, ret);
  CHECK(ret == -EPROTO || (ret >= 0 && ret <= (ssize_t)SIZE));
  if (w->p_bad) return;
  if (x - w->mp.head > w->mp.tail - w->mp.head) {
    CHECK(ret == -EPROTO);
    w->p_bad = w->lied = 1;
    return;
  }
  w->mp.head = x;
  CHECK(ret == (ssize_t)(SIZE - (w->mp.tail - x)));
}

static void op_avail(world_t *w)
{
  if (!w->attached) return;
  uint64_t y = ld(&w->ctl->tail);
  ssize_t ret = r2s__ring_avail(&w->c);
  TRACE("avail ctl.tail=%llu -> %zd\n", (unsigned long long)y, ret);
  CHECK(ret == -EPROTO || (ret >= 0 && ret <= (ssize_t)SIZE));
  if (w->c_bad) return;
  uint64_t d = y - w->mc.head;
  if (d > SIZE || d < w->mc.tail - w->mc.head) {
    CHECK(ret == -EPROTO);
    w->c_bad = w->lied = 1;
    return;
  }
  w->mc.tail = y;
  CHECK(ret == (ssize_t)d);
}

static void op_lie_index(world_t *w, cursor_t *cur, int is_head)
{
  uint8_t mode = rd8(cur) & 3;
  uint64_t v = rd64(cur);
  uint64_t *self = is_head ? &w->ctl->head : &w->ctl->tail;
  uint64_t *other = is_head ? &w->ctl->tail : &w->ctl->head;
  uint64_t cur_v = ld(self), nv;
  if (mode == RS_LIE_REL_SELF) nv = cur_v + step16(v);
  else if (mode == RS_LIE_REL_OTHER) nv = ld(other) + step16(v);
  else nv = v;
  TRACE("lie %s %llu -> %llu\n", is_head ? "head" : "tail", (unsigned long long)cur_v,
        (unsigned long long)nv);
  st(self, nv);
  if (nv != cur_v) w->lied = 1;
}

static void op_lie_word(world_t *w, cursor_t *cur)
{
  uint8_t which = rd8(cur) & 3;
  uint32_t v = rd32(cur);
  uint32_t *word = which == RS_WORD_PRODUCER_SLEEPING   ? &w->ctl->producer_sleeping
                   : which == RS_WORD_PRODUCER_CLOSED   ? &w->ctl->producer_closed
                   : which == RS_WORD_CONSUMER_SLEEPING ? &w->ctl->consumer_sleeping
                                                        : &w->ctl->consumer_closed;
  TRACE("word %d = %u\n", which, v);
  /* Not a lie about the data: the model goes on unchanged. */
  __atomic_store_n(word, v, __ATOMIC_SEQ_CST);
}

static void op_scribble(world_t *w, cursor_t *cur)
{
  size_t off = rd16(cur) & MASK, len = rd16(cur) % (SIZE + 1);
  uint8_t b = rd8(cur);
  TRACE("scribble off=%zu len=%zu\n", off, len);
  for (size_t i = 0; i < len; i++) w->data[(off + i) & MASK] = w->mirror[(off + i) & MASK] = b;
  if (len) w->lied = 1;
}

static void op_reattach(world_t *w, cursor_t *cur)
{
  uint64_t head = rd64(cur);
  uint8_t mode = rd8(cur);
  uint64_t t = rd64(cur);
  uint64_t tail = mode & RS_REATTACH_ABS ? t : head + step16(t);
  TRACE("reattach head=%llu tail=%llu\n", (unsigned long long)head, (unsigned long long)tail);
  reattach(w, head, tail);
}

/* ---- entry ------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static int inited;
  if (!inited) {
    const char *t = getenv("R2S_FUZZ_TRACE");
    trace = t && *t && *t != '0';
    inited = 1;
  }
  static world_t w; /* large; reset below, nothing carries over */
  memset(&w, 0, sizeof w);
  const size_t bytes = r2s__ring_bytes(SIZE);
  CHECK(bytes == R2S_RING_CTL_SIZE + SIZE);
  w.mem = malloc(bytes);
  CHECK(w.mem != NULL);
  /* Fresh memory, as the owner's new segment would be. */
  memset(w.mem, 0, bytes);
  w.ctl = (r2s_ring_ctl_t *)w.mem;
  w.data = w.mem + R2S_RING_CTL_SIZE;

  /* Sizes the ring cannot have are refused before memory is touched. */
  static const uint64_t bad_sizes[] = {0, 1, 2048, 4095, 4097, 3 * 4096, 4096 + 2048};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    r2s_ring_t r;
    CHECK(r2s__ring_attach(&r, w.mem, bad_sizes[i]) == -EINVAL);
  }

  cursor_t cur = {data, size, 0};
  uint64_t base = rd64(&cur);
  reattach(&w, base, base);
  CHECK(w.attached && !w.lied);

  while (cur.off < cur.n) {
    switch (rd8(&cur) % RS_OP_COUNT) {
    case RS_PUT: op_put(&w, &cur); break;
    case RS_GET: op_get(&w, &cur); break;
    case RS_SPACE: op_space(&w); break;
    case RS_AVAIL: op_avail(&w); break;
    case RS_LIE_HEAD: op_lie_index(&w, &cur, 1); break;
    case RS_LIE_TAIL: op_lie_index(&w, &cur, 0); break;
    case RS_LIE_WORD: op_lie_word(&w, &cur); break;
    case RS_SCRIBBLE: op_scribble(&w, &cur); break;
    case RS_REATTACH: op_reattach(&w, &cur); break;
    }
    check_views(&w);
  }
  free(w.mem);
  return 0;
}

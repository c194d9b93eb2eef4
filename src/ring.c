/* The SPSC byte ring: two memcpys around each wrap, indices checked. */
#include "ring.h"

#include <errno.h>
#include <string.h>

#include "clock.h"

void r2s__ring_format(void *mem, uint64_t size)
{
  (void)size;
  memset(mem, 0, sizeof(r2s_ring_ctl_t));
}

int r2s__ring_attach(r2s_ring_t *r, void *mem, uint64_t size)
{
  return r2s__ring_attach_split(r, mem, (uint8_t *)mem + R2S_RING_CTL_SIZE, size);
}

/* A ring's data size: a power of two of at least a page. */
static bool size_ok(uint64_t size)
{
  return size >= 4096 && (size & (size - 1)) == 0;
}

int r2s__ring_attach_split(r2s_ring_t *r, void *ctl, void *data, uint64_t size)
{
  if (!size_ok(size)) return -EINVAL;
  r->ctl = ctl;
  r->data = data;
  r->frozen = false;
  r->size = size;
  r->mask = size - 1;
  r->head = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE);
  r->tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE);
  if (r->tail - r->head > size) return -EINVAL;
  return 0;
}

int r2s__ring_narrow(r2s_ring_t *r, uint64_t size)
{
  if (!size_ok(size) || size > r->size || r->head != 0 || r->tail != 0) return -EINVAL;
  r->size = size;
  r->mask = size - 1;
  return 0;
}

ssize_t r2s__ring_space(r2s_ring_t *r)
{
  uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE);
  /* The consumer may only move head forward, and never past our tail. */
  if (head - r->head > r->tail - r->head) return -EPROTO;
  r->head = head;
  return (ssize_t)(r->size - (r->tail - head));
}

ssize_t r2s__ring_avail(r2s_ring_t *r)
{
  if (__atomic_load_n(&r->frozen, __ATOMIC_ACQUIRE))
    return (ssize_t)(__atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) - r->head);
  uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE);
  /* The producer may only move tail forward, and never more than a ring
   * ahead of what we consumed. */
  if (tail - r->head > r->size || tail - r->tail > r->size) return -EPROTO;
  r->tail = tail;
  return (ssize_t)(tail - r->head);
}

int r2s__ring_unacked(const r2s_ring_t *r, uint64_t from, struct iovec iov[2])
{
  if (from - r->head > r->tail - r->head) return -EPROTO;
  size_t len = (size_t)(r->tail - from), off = (size_t)(from & r->mask), first = r->size - off;
  if (len == 0) return 0;
  iov[0] = (struct iovec){r->data + off, len < first ? len : first};
  if (len <= first) return 1;
  iov[1] = (struct iovec){r->data, len - first};
  return 2;
}

int r2s__ring_freeze(r2s_ring_t *r, uint64_t at)
{
  if (at - r->head > r->tail - r->head) return -EINVAL;
  __atomic_store_n(&r->tail, at, __ATOMIC_RELEASE);
  __atomic_store_n(&r->frozen, true, __ATOMIC_RELEASE);
  return 0;
}

/* Copies len bytes between the ring at index idx and buf, in up to two
 * pieces around the wrap. */
static void copy_in(r2s_ring_t *r, uint64_t idx, const uint8_t *src, size_t len)
{
  size_t off = (size_t)(idx & r->mask), first = r->size - off;
  if (first >= len) {
    memcpy(r->data + off, src, len);
  } else {
    memcpy(r->data + off, src, first);
    memcpy(r->data, src + first, len - first);
  }
}

static void copy_out(r2s_ring_t *r, uint64_t idx, uint8_t *dst, size_t len)
{
  size_t off = (size_t)(idx & r->mask), first = r->size - off;
  if (first >= len) {
    memcpy(dst, r->data + off, len);
  } else {
    memcpy(dst, r->data + off, first);
    memcpy(dst + first, r->data, len - first);
  }
}

ssize_t r2s__ring_put(r2s_ring_t *r, const struct iovec *iov, int cnt, size_t skip, size_t max)
{
  ssize_t space = r2s__ring_space(r);
  if (space < 0) return space;
  size_t room = (size_t)space < max ? (size_t)space : max, done = 0;
  for (int i = 0; i < cnt && done < room; i++) {
    size_t len = iov[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    size_t n = len - skip;
    if (n > room - done) n = room - done;
    copy_in(r, r->tail + done, (const uint8_t *)iov[i].iov_base + skip, n);
    done += n;
    skip = 0;
  }
  if (done) {
    /* The ring was empty (r->head is the consumer's, just read): these
     * bytes are the oldest the consumer will see, and their stamp goes
     * out with the tail that publishes them. */
    if (r->head == r->tail) __atomic_store_n(&r->ctl->filled_at, r2s__order_stamp(), __ATOMIC_RELAXED);
    r->tail += done;
    /* A read-modify-write, not a plain store: it is also the full barrier
     * between publishing the bytes and reading consumer_sleeping that the
     * wake-up protocol needs (one locked instruction instead of a store
     * and a fence). */
    (void)__atomic_exchange_n(&r->ctl->tail, r->tail, __ATOMIC_SEQ_CST);
  }
  return (ssize_t)done;
}

uint64_t r2s__ring_filled_at(r2s_ring_t *r)
{
  if (r2s__ring_avail(r) <= 0) return 0;
  return __atomic_load_n(&r->ctl->filled_at, __ATOMIC_RELAXED);
}

ssize_t r2s__ring_get(r2s_ring_t *r, const struct iovec *iov, int cnt, size_t max, bool peek)
{
  ssize_t avail = r2s__ring_avail(r);
  if (avail < 0) return avail;
  size_t want = (size_t)avail < max ? (size_t)avail : max, done = 0;
  for (int i = 0; i < cnt && done < want; i++) {
    size_t n = iov[i].iov_len < want - done ? iov[i].iov_len : want - done;
    if (n == 0) continue; /* an empty iovec may have a NULL base */
    copy_out(r, r->head + done, iov[i].iov_base, n);
    done += n;
  }
  if (done && !peek) {
    r->head += done;
    /* Full barrier before producer_sleeping is read, as in put. */
    (void)__atomic_exchange_n(&r->ctl->head, r->head, __ATOMIC_SEQ_CST);
  }
  return (ssize_t)done;
}

/*
 * ring.h - a single-producer, single-consumer byte ring in memory that both
 * ends of a connection can touch (a shared-memory segment today, a
 * registered RDMA buffer with the same layout next).
 *
 * Contract:
 *  - Layout: one page of control (r2s_ring_ctl_t) followed by `size` data
 *    bytes, size a power of two. head and tail count bytes since the start,
 *    never wrap in practice (2^64), and index the data modulo size.
 *  - The producer writes data, then publishes tail with a release store;
 *    the consumer reads tail with an acquire load, copies, then publishes
 *    head with a release store. head is the credit: the producer may write
 *    up to head + size.
 *  - The other end may be hostile or broken: every index read from shared
 *    memory is checked (head <= tail <= head + size, monotonic) before it
 *    is used to address memory, and a bad one returns -EPROTO, after which
 *    the connection must be reset. Addresses are always computed from the
 *    local view (base, mask), never from shared memory.
 *  - The *_sleeping words carry the wake-up protocol: a side that is about
 *    to sleep sets its word, then re-checks the ring; the other side, after
 *    publishing, reads the word and rings the doorbell if it is set
 *    (sequentially consistent on both sides, so one of them always sees the
 *    other). put and get publish their index with a sequentially
 *    consistent read-modify-write, which is that barrier on their side.
 *  - *_woke_on: the side that rings records where it ran (1 + CPU, 0 for
 *    unknown), the other side reads it to tell whether its peer shares its
 *    CPU. A scheduling hint only, refreshed by every wake-up: any value,
 *    stale or hostile, is safe.
 *  - consumer_rcvbuf: the reader's SO_RCVBUF, for a producer whose
 *    application sized its send buffer (transport.h, size_buffers). A
 *    bound on how far the producer runs ahead, never an index: any value,
 *    stale or hostile, is safe.
 *  - r2s_ring_t is the local, private view; only *ctl and *data are shared.
 */
#ifndef R2S_RING_H
#define R2S_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define R2S_RING_CTL_SIZE 4096u

typedef struct r2s_ring_ctl_s {
  /* producer-written line */
  uint64_t tail;
  uint32_t producer_sleeping; /* waiting for credits: nonzero, the free bytes it waits for (shm) */
  uint32_t producer_closed;   /* no more bytes will come after tail */
  uint64_t producer_sleep_at; /* RDMA: the head the producer saw when it went to sleep */
  uint32_t producer_woke_on;  /* shm: 1 + the CPU the producer was on when it woke the consumer */
  uint32_t pad_a;
  uint64_t filled_at;         /* r2s__order_stamp() when a put found the ring empty; 0: not said */
  uint8_t pad0[64 - 40];
  /* consumer-written line */
  uint64_t head;
  uint32_t consumer_sleeping; /* waiting for bytes */
  uint32_t consumer_closed;   /* the reader is gone: writes fail with EPIPE */
  uint64_t consumer_sleep_at; /* RDMA: the head at which the consumer went to sleep */
  uint32_t consumer_woke_on;  /* shm: 1 + the CPU the consumer was on when it woke the producer */
  uint32_t consumer_recvs;    /* RDMA: receives the consumer reposted for the producer's immediates (mod 2^32) */
  uint32_t consumer_rcvbuf;   /* shm: the consumer's socket receive buffer (SO_RCVBUF), 0: not said */
  uint8_t pad1[64 - 36];
} r2s_ring_ctl_t;
/* Both ends address these: they are protocol (docs/protocol.md). */
_Static_assert(offsetof(r2s_ring_ctl_t, consumer_rcvbuf) == 96 && offsetof(r2s_ring_ctl_t, filled_at) == 32 &&
                   sizeof(r2s_ring_ctl_t) == 128,
               "the ring control page's layout");

typedef struct r2s_ring_s {
  r2s_ring_ctl_t *ctl;
  uint8_t *data;
  uint64_t size, mask;
  uint64_t head, tail; /* this side's own view, checked against ctl */
  /* Consumer: the channel under the ring failed (r2s__ring_freeze): the
   * ring ends at tail, whatever the producer writes into ctl later. */
  bool frozen;
} r2s_ring_t;

/* Bytes a mapping of a ring with `size` data bytes needs. */
static inline size_t r2s__ring_bytes(uint64_t size)
{
  return R2S_RING_CTL_SIZE + (size_t)size;
}

/* Prepares fresh memory (the owner, before it offers the ring). */
void r2s__ring_format(void *mem, uint64_t size);

/* Builds the local view; size must be a power of two >= 4096. Returns 0 or
 * -EINVAL. The view starts at the indices found in memory. */
int r2s__ring_attach(r2s_ring_t *r, void *mem, uint64_t size);
/* The same with the control page and the data apart (an RDMA producer's
 * local copy of the peer's ring, whose control page exists before the
 * data's size is known). */
int r2s__ring_attach_split(r2s_ring_t *r, void *ctl, void *data, uint64_t size);

/* Uses only the first `size` bytes of the data from now on: a power of two
 * >= 4096 and no larger than the ring, before any byte moved (an RDMA
 * ring fitted to its producer, transport/rdma_fit.h). Touches the view
 * alone, so it may run beside threads that look at the control page.
 * Returns 0 or -EINVAL. */
int r2s__ring_narrow(r2s_ring_t *r, uint64_t size);

/* Producer: free space (>= 0), or -EPROTO if the consumer's head is bogus. */
ssize_t r2s__ring_space(r2s_ring_t *r);
/* Producer: copies up to max bytes from iov (skipping the first `skip`
 * bytes of it), as many as fit, publishes them; returns the count or
 * -EPROTO. */
ssize_t r2s__ring_put(r2s_ring_t *r, const struct iovec *iov, int cnt, size_t skip, size_t max);

/* Consumer: bytes ready (>= 0), or -EPROTO if the producer's tail is bogus. */
ssize_t r2s__ring_avail(r2s_ring_t *r);
/* Producer: the bytes put from stream offset `from` to the tail, in at
 * most two pieces (the count), or -EPROTO if `from` lies before the
 * head last checked (those bytes may be overwritten) or past the tail.
 * The consumer has taken everything before that head. */
int r2s__ring_unacked(const r2s_ring_t *r, uint64_t from, struct iovec iov[2]);
/* Consumer: from now on the ring holds the bytes up to `at` and no more
 * (what the producer writes later is not read): head <= at <= the tail
 * last checked, else -EINVAL. */
int r2s__ring_freeze(r2s_ring_t *r, uint64_t at);
/* Consumer: when the oldest bytes in the ring came (filled_at: what the
 * producer stamped when it put bytes into the empty ring), for ordering
 * the readiness of several rings; 0 when the ring is empty or the
 * producer says nothing (an RDMA peer, an older shim). A hostile value
 * only changes the order in which this end's epoll reports its rings. */
uint64_t r2s__ring_filled_at(r2s_ring_t *r);
/* Consumer: copies up to max bytes into iov; advances head unless peek.
 * Returns the count or -EPROTO. */
ssize_t r2s__ring_get(r2s_ring_t *r, const struct iovec *iov, int cnt, size_t max, bool peek);

#endif

/*
 * transport_loop.c - a transport for tests: rings in this process's heap,
 * reached only by connections whose two ends live in this process. It
 * proves the transport contract (transport.h) open: this file and one
 * line in src/transport/registry.c are all it takes, and the link moves
 * a connection's bytes through it without knowing it.
 *
 * Chosen only after r2s__loop_enable(true) (its rank is 0 otherwise), and
 * then for every connection; counted as a same-host path. Its offer (kind
 * LOOP_KIND, in the range kept for transports outside the product) says
 * which process made the ring and its number there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring.h"
#include "path.h"
#include "transport.h"
#include "wire.h"

#define LOOP_KIND 200
#define LOOP_RING (64u << 10)
#define LOOP_MAX  64 /* rings alive at once */

void r2s__loop_enable(bool on);
uint64_t r2s__loop_rings_made(void);

/* A ring's memory lives until both its consumer and its producer let go. */
typedef struct slot_s {
  void *mem;
  int refs;
} slot_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot_t slots[LOOP_MAX];
static bool enabled;
static uint64_t made;

struct r2s_tp_state_s {
  uint32_t own_id, peer_id;
  bool attached;
  r2s_ring_t own, peer;
};

void r2s__loop_enable(bool on)
{
  __atomic_store_n(&enabled, on, __ATOMIC_RELEASE);
}

uint64_t r2s__loop_rings_made(void)
{
  return __atomic_load_n(&made, __ATOMIC_ACQUIRE);
}

static void slot_put(uint32_t id)
{
  pthread_mutex_lock(&lock);
  if (--slots[id].refs == 0) free(slots[id].mem), slots[id].mem = NULL;
  pthread_mutex_unlock(&lock);
}

static int loop_rank(const r2s_tp_conn_t *conn)
{
  (void)conn;
  return __atomic_load_n(&enabled, __ATOMIC_ACQUIRE) ? 100 : 0;
}

static int loop_offer(r2s_tp_state_t **out, r2s_handshake_t *hs, const r2s_tp_conn_t *conn)
{
  (void)conn;
  r2s_tp_state_t *st = calloc(1, sizeof *st);
  void *mem = aligned_alloc(4096, r2s__ring_bytes(LOOP_RING));
  if (!st || !mem) {
    free(st), free(mem);
    return -ENOMEM;
  }
  r2s__ring_format(mem, LOOP_RING);
  pthread_mutex_lock(&lock);
  uint32_t id = 0;
  while (id < LOOP_MAX && slots[id].mem) id++;
  if (id < LOOP_MAX) slots[id] = (slot_t){mem, 1};
  pthread_mutex_unlock(&lock);
  uint8_t body[12];
  r2s__put32(body, (uint32_t)getpid());
  r2s__put32(body + 4, id);
  r2s__put32(body + 8, LOOP_RING);
  if (id == LOOP_MAX || r2s__ring_attach(&st->own, mem, LOOP_RING) < 0 ||
      r2s__handshake_add_offer(hs, LOOP_KIND, body, sizeof body) < 0) {
    if (id < LOOP_MAX) slot_put(id);
    else free(mem);
    free(st);
    return -ENOSPC;
  }
  st->own_id = id;
  __atomic_add_fetch(&made, 1, __ATOMIC_ACQ_REL);
  *out = st;
  return 0;
}

/* The peer's ring number, if its offer is one of this process's. */
static int peer_ring(const r2s_handshake_t *peer, uint32_t *id)
{
  size_t len;
  const uint8_t *b = r2s__handshake_offer(peer, LOOP_KIND, &len);
  if (!b) return -ENOPROTOOPT;
  if (len != 12 || r2s__get32(b + 8) != LOOP_RING || r2s__get32(b + 4) >= LOOP_MAX) return -EPROTO;
  if (r2s__get32(b) != (uint32_t)getpid()) return -ENOPROTOOPT;
  *id = r2s__get32(b + 4);
  return 0;
}

static int loop_check(const r2s_handshake_t *peer)
{
  uint32_t id;
  return peer_ring(peer, &id) == -EPROTO ? -EPROTO : 0;
}

static bool loop_reaches(const r2s_handshake_t *mine, const r2s_handshake_t *peer)
{
  (void)mine;
  uint32_t id;
  return peer_ring(peer, &id) == 0;
}

static int loop_attach(r2s_tp_state_t *st, const r2s_handshake_t *peer)
{
  uint32_t id;
  int rc = peer_ring(peer, &id);
  if (rc < 0) return rc;
  pthread_mutex_lock(&lock);
  void *mem = slots[id].mem;
  if (mem && mem != st->own.ctl) slots[id].refs++;
  pthread_mutex_unlock(&lock);
  /* Our own ring offered back to us would make us our own producer. */
  if (!mem || mem == st->own.ctl) return -EPROTO;
  if (r2s__ring_attach(&st->peer, mem, LOOP_RING) < 0) {
    slot_put(id);
    return -EPROTO;
  }
  st->peer_id = id;
  __atomic_store_n(&st->attached, true, __ATOMIC_RELEASE);
  return 0;
}

static void loop_seal(r2s_tp_state_t *st)
{
  (void)st;
}

static ssize_t loop_space(r2s_tp_state_t *st)
{
  if (__atomic_load_n(&st->peer.ctl->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  return r2s__ring_space(&st->peer);
}

static ssize_t loop_put(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max)
{
  if (__atomic_load_n(&st->peer.ctl->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  return r2s__ring_put(&st->peer, iov, cnt, skip, max);
}

static ssize_t loop_avail(r2s_tp_state_t *st)
{
  return r2s__ring_avail(&st->own);
}

static ssize_t loop_get(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek)
{
  return r2s__ring_get(&st->own, iov, cnt, max, peek);
}

static uint64_t loop_produced(r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->attached, __ATOMIC_ACQUIRE) ? st->peer.tail : 0;
}

static uint64_t loop_consumed(r2s_tp_state_t *st)
{
  return st->own.head;
}

/* The wake-up words as ring.h describes them: set, fence, re-check. */
static void loop_sleep_rx(r2s_tp_state_t *st, bool on)
{
  __atomic_store_n(&st->own.ctl->consumer_sleeping, on, __ATOMIC_SEQ_CST);
}

static void loop_sleep_tx(r2s_tp_state_t *st, bool on)
{
  __atomic_store_n(&st->peer.ctl->producer_sleeping, on, __ATOMIC_SEQ_CST);
}

static bool loop_take_peer_rx_sleeper(r2s_tp_state_t *st)
{
  return __atomic_exchange_n(&st->peer.ctl->consumer_sleeping, 0, __ATOMIC_SEQ_CST) != 0;
}

static bool loop_take_peer_tx_sleeper(r2s_tp_state_t *st)
{
  return __atomic_exchange_n(&st->own.ctl->producer_sleeping, 0, __ATOMIC_SEQ_CST) != 0;
}

static bool loop_peer_tx_closed(r2s_tp_state_t *st)
{
  return __atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE) != 0;
}

static void loop_close_tx(r2s_tp_state_t *st)
{
  if (__atomic_load_n(&st->attached, __ATOMIC_ACQUIRE))
    __atomic_store_n(&st->peer.ctl->producer_closed, 1, __ATOMIC_RELEASE);
}

static void loop_flush(r2s_tp_state_t *st)
{
  (void)st; /* a put is in the peer's ring when it returns */
}

static void loop_release(r2s_tp_state_t *st)
{
  slot_put(st->own_id);
  if (st->attached) slot_put(st->peer_id);
  free(st);
}

const r2s_transport_t r2s__transport_loop = {
    .name = "loop",
    .path = R2S_PATH_SHM, /* a ring on this host */
    .rank = loop_rank,
    .offer = loop_offer,
    .check = loop_check,
    .reaches = loop_reaches,
    .attach = loop_attach,
    .seal = loop_seal,
    .space = loop_space,
    .put = loop_put,
    .avail = loop_avail,
    .get = loop_get,
    .produced = loop_produced,
    .consumed = loop_consumed,
    .sleep_rx = loop_sleep_rx,
    .sleep_tx = loop_sleep_tx,
    .take_peer_rx_sleeper = loop_take_peer_rx_sleeper,
    .take_peer_tx_sleeper = loop_take_peer_tx_sleeper,
    .peer_tx_closed = loop_peer_tx_closed,
    .close_tx = loop_close_tx,
    .flush = loop_flush,
    .release = loop_release,
};

/*
 * gen_seeds - writes the seed corpora of the fuzz targets:
 *   gen_seeds FRAME_DIR RING_DIR
 *
 * Frame seeds are built with the real encoders, so they stay valid as the
 * format evolves: one of each frame type, handshakes with no offer, each
 * offer, both offers and an offer kind from the future, and a whole
 * conversation in one stream. Ring seeds are scripts (ring_script.h) that
 * reach each interesting state cheaply: wrap-around, 64-bit index wrap,
 * iovec splits, and each kind of lie.
 *
 * The committed corpus in tests/fuzz/corpus/ is this program's output; the
 * fuzz tests also rerun it into their working copy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "transport/rdma_offer.h"
#include "transport/shm_offer.h"
#include "ring_script.h"

static const char *frame_dir, *ring_dir;

static void die(const char *what)
{
  perror(what);
  exit(1);
}

static void save(const char *dir, const char *name, const uint8_t *b, size_t n)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) die(path);
  if (n && fwrite(b, 1, n, f) != n) die(path);
  if (fclose(f) != 0) die(path);
}

/* ---- frames ----------------------------------------------------------- */

static r2s_handshake_t sample_handshake(int shm, int rdma)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  h.version = R2S_PROTO_VERSION;
  h.min_version = R2S_PROTO_VERSION;
  h.caps = 0x3;
  for (int i = 0; i < 16; i++) h.boot_id[i] = (uint8_t)(0x10 + i);
  h.netns = 4026531840u; /* the usual init netns inode */
  if (shm) {
    r2s_offer_shm_t o = {.ring_size = 1u << 20};
    snprintf(o.name, sizeof o.name, "/r2s-1234-5678");
    if (r2s__shm_offer_put(&h, &o) < 0) die("shm_offer_put");
  }
  if (rdma) {
    r2s_offer_rdma_t o = {
        .qpn = 0x11a,
        .psn = 0x5a5a5a,
        .lid = 0,
        .mtu = 3, /* IBV_MTU_1024 */
        .ring_addr = 0x7f0000100000ull,
        .ring_size = 1u << 20,
        .ring_rkey = 0x1234,
        .credit_addr = 0x7f0000200040ull,
        .credit_rkey = 0x5678,
    };
    for (int i = 0; i < 16; i++) o.gid[i] = (uint8_t)(i == 10 || i == 11 ? 0xff : i > 11 ? 10 + i : 0);
    if (r2s__rdma_offer_put(&h, &o) < 0) die("rdma_offer_put");
  }
  return h;
}

static size_t put_handshake(uint8_t *b, size_t cap, int shm, int rdma)
{
  r2s_handshake_t h = sample_handshake(shm, rdma);
  int n = r2s__handshake_encode(&h, b, cap);
  if (n < 0) die("handshake_encode");
  return (size_t)n;
}

static size_t put_u64(uint8_t *b, size_t cap, uint8_t type, uint64_t v)
{
  int n = r2s__frame_u64_encode(type, v, b, cap);
  if (n < 0) die("frame_u64_encode");
  return (size_t)n;
}

static size_t put_data(uint8_t *b, size_t cap, const char *s)
{
  size_t len = strlen(s);
  if (r2s__frame_hdr_put(b, cap, R2S_FRAME_DATA, (uint32_t)len) < 0 || cap < R2S_FRAME_HDR_LEN + len)
    die("frame_hdr_put");
  memcpy(b + R2S_FRAME_HDR_LEN, s, len);
  return R2S_FRAME_HDR_LEN + len;
}

static void frame_seeds(void)
{
  uint8_t b[2048];
  size_t n;

  n = put_handshake(b, sizeof b, 1, 1);
  save(frame_dir, "handshake-shm-rdma", b, n);
  save(frame_dir, "handshake-shm", b, put_handshake(b, sizeof b, 1, 0));
  save(frame_dir, "handshake-rdma", b, put_handshake(b, sizeof b, 0, 1));
  save(frame_dir, "handshake-bare", b, put_handshake(b, sizeof b, 0, 0));

  /* A newer peer's offer (kind 9, 5 bytes) ahead of shm: must be skipped. */
  n = put_handshake(b, sizeof b, 0, 0);
  {
    uint8_t tail[2048];
    size_t tn = put_handshake(tail, sizeof tail, 1, 0) - n; /* the shm offer alone */
    memcpy(tail, tail + n, tn);
    static const uint8_t future[] = {9, 5, 0, 'h', 'e', 'l', 'l', 'o'};
    memcpy(b + n, future, sizeof future);
    memcpy(b + n + sizeof future, tail, tn);
    n += sizeof future + tn;
    r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_HANDSHAKE, (uint32_t)(n - R2S_FRAME_HDR_LEN));
    save(frame_dir, "handshake-future-offer", b, n);
  }

  /* A peer that only speaks versions 2..3: -EPROTONOSUPPORT. */
  n = put_handshake(b, sizeof b, 1, 0);
  b[R2S_FRAME_HDR_LEN] = 3, b[R2S_FRAME_HDR_LEN + 2] = 2;
  save(frame_dir, "handshake-v2-only", b, n);

  save(frame_dir, "data", b, put_data(b, sizeof b, "GET / HTTP/1.0\r\n\r\n"));
  save(frame_dir, "ring", b, put_u64(b, sizeof b, R2S_FRAME_RING, 1234567));
  save(frame_dir, "credit", b, put_u64(b, sizeof b, R2S_FRAME_CREDIT, 1u << 20));
  save(frame_dir, "fin", b, put_u64(b, sizeof b, R2S_FRAME_FIN, 0xffffffffffffull));
  save(frame_dir, "decline", b, put_u64(b, sizeof b, R2S_FRAME_DECLINE, ENODEV));
  if (r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_DOORBELL, 0) < 0) die("frame_hdr_put");
  save(frame_dir, "doorbell", b, R2S_FRAME_HDR_LEN);
  if (r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_READY, 0) < 0) die("frame_hdr_put");
  save(frame_dir, "ready", b, R2S_FRAME_HDR_LEN);

  /* A ring by descriptor (docs/protocol.md): the taker's FETCH, the
   * owner's HANDED, then RING as usual. */
  {
    r2s_fetch_t f = {.addr_len = 6, .addr = {0, '0', '0', '0', '2', 'a'}};
    r2s_handed_t m = {.status = 0};
    for (int i = 0; i < R2S_NONCE_LEN; i++) m.nonce[i] = (uint8_t)(i * 29 + 7);
    int k = r2s__fetch_encode(&f, b, sizeof b);
    if (k < 0) die("fetch_encode");
    save(frame_dir, "fetch", b, (size_t)k);
    k = r2s__handed_encode(&m, b, sizeof b);
    if (k < 0) die("handed_encode");
    save(frame_dir, "handed", b, (size_t)k);
    n = put_handshake(b, sizeof b, 1, 0);
    n += put_data(b + n, sizeof b - n, "before the ring came");
    k = r2s__fetch_encode(&f, b + n, sizeof b - n);
    if (k < 0) die("fetch_encode");
    n += (size_t)k;
    k = r2s__handed_encode(&m, b + n, sizeof b - n);
    if (k < 0) die("handed_encode");
    n += (size_t)k;
    n += put_u64(b + n, sizeof b - n, R2S_FRAME_RING, 0);
    save(frame_dir, "conversation-fetch", b, n);
  }

  /* An RDMA direction: handshake, DATA until the peer's READY, then RING. */
  n = put_handshake(b, sizeof b, 0, 1);
  n += put_data(b + n, sizeof b - n, "before ready");
  if (r2s__frame_hdr_put(b + n, sizeof b - n, R2S_FRAME_READY, 0) < 0) die("frame_hdr_put");
  n += R2S_FRAME_HDR_LEN;
  n += put_u64(b + n, sizeof b - n, R2S_FRAME_RING, 0);
  save(frame_dir, "conversation-rdma", b, n);

  /* One direction's whole life after its switch mark. */
  n = put_handshake(b, sizeof b, 1, 1);
  n += put_data(b + n, sizeof b - n, "hello over tcp");
  n += put_u64(b + n, sizeof b - n, R2S_FRAME_RING, 14);
  if (r2s__frame_hdr_put(b + n, sizeof b - n, R2S_FRAME_DOORBELL, 0) < 0) die("frame_hdr_put");
  n += R2S_FRAME_HDR_LEN;
  n += put_u64(b + n, sizeof b - n, R2S_FRAME_CREDIT, 4096);
  n += put_u64(b + n, sizeof b - n, R2S_FRAME_FIN, 8192);
  save(frame_dir, "conversation", b, n);

  /* The same, declined: the direction stays on DATA frames. */
  n = put_handshake(b, sizeof b, 1, 0);
  n += put_u64(b + n, sizeof b - n, R2S_FRAME_DECLINE, 1);
  n += put_data(b + n, sizeof b - n, "still tcp");
  save(frame_dir, "conversation-declined", b, n);
}

/* ---- ring scripts ----------------------------------------------------- */

typedef struct script_s {
  uint8_t b[512];
  size_t n;
} script_t;

static void w8(script_t *s, uint8_t v)
{
  if (s->n >= sizeof s->b) {
    fprintf(stderr, "gen_seeds: script too long\n");
    exit(1);
  }
  s->b[s->n++] = v;
}
static void w16(script_t *s, uint16_t v)
{
  w8(s, (uint8_t)v), w8(s, (uint8_t)(v >> 8));
}
static void w32(script_t *s, uint32_t v)
{
  w16(s, (uint16_t)v), w16(s, (uint16_t)(v >> 16));
}
static void w64(script_t *s, uint64_t v)
{
  w32(s, (uint32_t)v), w32(s, (uint32_t)(v >> 32));
}

static void s_put(script_t *s, uint16_t total, uint16_t skip, uint16_t max)
{
  w8(s, RS_PUT), w16(s, total), w8(s, 1), w16(s, skip), w16(s, max);
}
/* A put over three iovecs of a, b and the rest. */
static void s_put3(script_t *s, uint16_t total, uint16_t skip, uint16_t a, uint16_t b)
{
  w8(s, RS_PUT), w16(s, total), w8(s, 3), w16(s, skip), w16(s, RS_MAX_NOLIMIT), w16(s, a), w16(s, b);
}
static void s_get(script_t *s, uint16_t total, uint16_t max, int peek)
{
  w8(s, RS_GET), w16(s, total), w8(s, 1), w16(s, max), w8(s, (uint8_t)peek);
}
static void s_get4_null(script_t *s, uint16_t total)
{
  /* four iovecs: 0 (NULL), 100, 0 (NULL), the rest */
  w8(s, RS_GET), w16(s, total), w8(s, 4 | RS_SEG_NULL), w16(s, RS_MAX_NOLIMIT), w8(s, 0);
  w16(s, 0), w16(s, 100), w16(s, 0);
}
static void s_lie(script_t *s, int head, uint8_t mode, uint64_t v)
{
  w8(s, head ? RS_LIE_HEAD : RS_LIE_TAIL), w8(s, mode), w64(s, v);
}

static void ring_seeds(void)
{
  script_t s;

  /* Write, peek, read, in the middle of the index space. */
  s = (script_t){.n = 0};
  w64(&s, 0);
  s_put(&s, 1000, 0, RS_MAX_NOLIMIT);
  s_get(&s, 500, RS_MAX_NOLIMIT, 1);
  s_get(&s, 2000, 600, 0);
  w8(&s, RS_AVAIL), w8(&s, RS_SPACE);
  s_get(&s, 2000, RS_MAX_NOLIMIT, 0);
  save(ring_dir, "basic", s.b, s.n);

  /* Fill the ring, overfill it, drain it across the wrap. */
  s = (script_t){.n = 0};
  w64(&s, 3000);
  s_put(&s, 5000, 0, RS_MAX_NOLIMIT);
  w8(&s, RS_SPACE);
  s_get(&s, 1500, RS_MAX_NOLIMIT, 0);
  s_put3(&s, 3000, 100, 50, 1000);
  s_get4_null(&s, 6000);
  save(ring_dir, "wrap-iovecs", s.b, s.n);

  /* Indices a few bytes short of 2^64: the 64-bit counters wrap. */
  s = (script_t){.n = 0};
  w64(&s, UINT64_MAX - 1500);
  s_put(&s, 4096, 0, RS_MAX_NOLIMIT);
  s_get(&s, 3000, RS_MAX_NOLIMIT, 0);
  s_put(&s, 3000, 0, RS_MAX_NOLIMIT);
  s_get(&s, 8000, RS_MAX_NOLIMIT, 0);
  save(ring_dir, "index-wrap", s.b, s.n);

  /* The consumer claims more credit than it was given, then a legal lie. */
  s = (script_t){.n = 0};
  w64(&s, 0);
  s_put(&s, 2000, 0, RS_MAX_NOLIMIT);
  s_lie(&s, 1, RS_LIE_REL_OTHER, 1);
  w8(&s, RS_SPACE);
  w8(&s, RS_REATTACH), w64(&s, 100), w8(&s, RS_REATTACH_REL), w64(&s, 0);
  s_put(&s, 2000, 0, RS_MAX_NOLIMIT);
  s_lie(&s, 1, RS_LIE_REL_SELF, 700);
  s_put(&s, 4000, 0, RS_MAX_NOLIMIT);
  s_get(&s, 4096, RS_MAX_NOLIMIT, 0);
  save(ring_dir, "lie-head", s.b, s.n);

  /* The producer claims a ring and a byte, moves backwards, or jumps. */
  s = (script_t){.n = 0};
  w64(&s, 5);
  s_put(&s, 100, 0, RS_MAX_NOLIMIT);
  s_lie(&s, 0, RS_LIE_REL_OTHER, RS_RING_SIZE + 1);
  w8(&s, RS_AVAIL);
  w8(&s, RS_REATTACH), w64(&s, 5), w8(&s, RS_REATTACH_REL), w64(&s, 0);
  s_put(&s, 100, 0, RS_MAX_NOLIMIT);
  w8(&s, RS_AVAIL);
  s_lie(&s, 0, RS_LIE_REL_SELF, 0xffff); /* one byte backwards */
  s_get(&s, 100, RS_MAX_NOLIMIT, 0);
  w8(&s, RS_REATTACH), w64(&s, 0), w8(&s, RS_REATTACH_ABS), w64(&s, UINT64_MAX);
  w8(&s, RS_REATTACH), w64(&s, 0), w8(&s, RS_REATTACH_REL), w64(&s, RS_RING_SIZE);
  s_get(&s, 5000, RS_MAX_NOLIMIT, 1);
  save(ring_dir, "lie-tail", s.b, s.n);

  /* The wake-up words and the data are the peer's to scribble on. */
  s = (script_t){.n = 0};
  w64(&s, 77);
  s_put(&s, 300, 0, RS_MAX_NOLIMIT);
  for (uint8_t i = 0; i < 4; i++) w8(&s, RS_LIE_WORD), w8(&s, i), w32(&s, 0xffffffffu - i);
  s_get(&s, 300, RS_MAX_NOLIMIT, 1);
  w8(&s, RS_SCRIBBLE), w16(&s, 4000), w16(&s, 200), w8(&s, 0xcc);
  s_get(&s, 300, RS_MAX_NOLIMIT, 0);
  save(ring_dir, "words-scribble", s.b, s.n);
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "usage: gen_seeds FRAME_DIR RING_DIR\n");
    return 2;
  }
  frame_dir = argv[1], ring_dir = argv[2];
  frame_seeds();
  ring_seeds();
  return 0;
}

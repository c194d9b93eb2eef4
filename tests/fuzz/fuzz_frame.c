/*
 * fuzz_frame - libFuzzer target for every parser of peer-chosen frame bytes
 * (src/frame.c).
 *
 * The input is what a peer put on the stream after its switch mark. It is
 * walked the way a receiver walks it: parse a header, take the payload that
 * follows (bounded by what is there), decode it, go on. Each parser gets an
 * exactly sized heap copy of its bytes, so a read past them is an ASan report
 * rather than a silent read of the next frame.
 *
 * Properties checked (abort() on violation, so libFuzzer keeps the input):
 *  - header: over every prefix length, the verdict only ever hardens
 *    (-EAGAIN -> 0 or -EPROTO, never back), a parsed header is the same for
 *    every longer prefix, and it matches the bytes and the per-type limits;
 *  - decoders return only the documented codes, and fail exactly when the
 *    contract says (length, versions);
 *  - whatever decodes re-encodes (exact caps, -ENOSPC one byte short) and
 *    decodes again to the same value, and encoding is then a fixed point;
 *  - a handshake built from raw input bytes survives encode/decode, or is
 *    refused only for a documented reason.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "transport/rdma_offer.h"
#include "transport/shm_offer.h"

#define CHECK(c)                                                                   \
  do {                                                                             \
    if (!(c)) {                                                                    \
      fprintf(stderr, "fuzz_frame: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

/* The fixed handshake part (version, min version, caps, boot id, netns):
 * anything shorter cannot be a handshake. */
#define HS_FIXED_LEN 32
/* Larger than any handshake this encoder can produce (fixed + two offers). */
#define HS_ENCODE_MAX 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A heap copy of exactly n bytes: ASan then catches a read of byte n. */
static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
  uint8_t *q = malloc(n ? n : 1);
  CHECK(q != NULL);
  if (n) memcpy(q, p, n);
  return q;
}

static uint32_t le32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
  return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static uint32_t type_limit(uint8_t type)
{
  return type == R2S_FRAME_DATA ? R2S_FRAME_DATA_MAX : R2S_FRAME_CTRL_MAX;
}

/* ---- headers ---------------------------------------------------------- */

static int parse_hdr(const uint8_t *buf, size_t n, r2s_frame_hdr_t *h)
{
  int rc = r2s__frame_hdr_parse(buf, n, h);
  CHECK(rc == 0 || rc == -EAGAIN || rc == -EPROTO);
  if (n < R2S_FRAME_HDR_LEN) CHECK(rc != 0);
  if (n >= R2S_FRAME_HDR_LEN) CHECK(rc != -EAGAIN);
  if (rc == 0) {
    CHECK(h->type >= 1 && h->type <= R2S_FRAME_TYPE_MAX);
    CHECK(h->type == buf[0] && h->flags == buf[1]);
    CHECK(buf[2] == 0 && buf[3] == 0);
    CHECK(h->len == le32(buf + 4));
    CHECK(h->len <= type_limit(h->type));
  }
  /* A judgement on a full header must be the contract's, byte by byte. */
  if (n >= R2S_FRAME_HDR_LEN) {
    int bad = buf[0] == 0 || buf[0] > R2S_FRAME_TYPE_MAX || buf[2] != 0 || buf[3] != 0 ||
              le32(buf + 4) > type_limit(buf[0]);
    CHECK(bad ? rc == -EPROTO : rc == 0);
  }
  return rc;
}

/* Every prefix of the frame starting at buf, as a receiver sees it arrive a
 * byte at a time. Short prefixes get their own exact buffers; from the full
 * header on, the parser must not look further, so the shared buffer will do
 * (longer prefixes only re-check that the verdict stays put). */
static void check_prefixes(const uint8_t *buf, size_t n)
{
  int prev = -EAGAIN;
  r2s_frame_hdr_t first = {0}, h;
  size_t lim = n < 4 * R2S_FRAME_HDR_LEN ? n : 4 * R2S_FRAME_HDR_LEN;
  for (size_t k = 0; k <= lim; k++) {
    uint8_t *p = dup_exact(buf, k);
    memset(&h, 0xa5, sizeof h);
    int rc = parse_hdr(p, k, &h);
    free(p);
    /* -EAGAIN may turn into anything; a verdict never changes. */
    if (prev != -EAGAIN) CHECK(rc == prev);
    if (rc == 0 && prev == -EAGAIN) first = h;
    if (rc == 0) CHECK(h.type == first.type && h.flags == first.flags && h.len == first.len);
    prev = rc;
  }
  if (n > lim) {
    int rc = parse_hdr(buf, n, &h);
    CHECK(rc == prev);
    if (rc == 0) CHECK(h.type == first.type && h.flags == first.flags && h.len == first.len);
  }
}

static void hdr_roundtrip(const r2s_frame_hdr_t *h)
{
  uint8_t *b = malloc(R2S_FRAME_HDR_LEN);
  CHECK(b != NULL);
  CHECK(r2s__frame_hdr_put(b, R2S_FRAME_HDR_LEN - 1, h->type, h->len) == -ENOSPC);
  CHECK(r2s__frame_hdr_put(b, R2S_FRAME_HDR_LEN, h->type, h->len) == R2S_FRAME_HDR_LEN);
  r2s_frame_hdr_t g;
  CHECK(parse_hdr(b, R2S_FRAME_HDR_LEN, &g) == 0);
  CHECK(g.type == h->type && g.len == h->len && g.flags == 0);
  free(b);
}

/* ---- u64 frames ------------------------------------------------------- */

static void u64_roundtrip(uint8_t type, uint64_t v)
{
  const size_t n = R2S_FRAME_HDR_LEN + 8;
  uint8_t *b = malloc(n);
  CHECK(b != NULL);
  CHECK(r2s__frame_u64_encode(type, v, b, n - 1) == -ENOSPC);
  CHECK(r2s__frame_u64_encode(type, v, b, n) == (int)n);
  r2s_frame_hdr_t h;
  CHECK(parse_hdr(b, n, &h) == 0);
  CHECK(h.type == type && h.len == 8 && h.flags == 0);
  uint8_t *pl = dup_exact(b + R2S_FRAME_HDR_LEN, 8);
  uint64_t w = ~v;
  CHECK(r2s__frame_u64_decode(pl, 8, &w) == 0);
  CHECK(w == v);
  free(pl);
  free(b);
}

static void decode_u64(uint8_t type, const uint8_t *p, size_t len)
{
  uint64_t v = 0;
  int rc = r2s__frame_u64_decode(p, len, &v);
  CHECK(rc == 0 || rc == -EPROTO);
  CHECK((rc == 0) == (len == 8));
  if (rc) return;
  CHECK(v == le64(p));
  /* Re-encode under the type it came with if that is a u64 frame, else
   * under RING, so that every decoded value goes round once. */
  int u64_type = type == R2S_FRAME_RING || type == R2S_FRAME_CREDIT || type == R2S_FRAME_FIN ||
                 type == R2S_FRAME_DECLINE;
  u64_roundtrip(u64_type ? type : R2S_FRAME_RING, v);
}

/* ---- FETCH and HANDED -------------------------------------------------- */

/* FETCH: accepted exactly when the length byte says what follows and the
 * address is abstract (first byte NUL), 1 to 108 bytes; then it goes
 * round. */
static void decode_fetch(const uint8_t *p, size_t len)
{
  r2s_fetch_t f;
  memset(&f, 0x5a, sizeof f);
  int rc = r2s__fetch_decode(p, len, &f);
  CHECK(rc == 0 || rc == -EPROTO);
  int valid = len >= 2 && len <= 1 + R2S_FETCH_ADDR_MAX && p[0] == len - 1 && p[1] == 0;
  CHECK(valid == (rc == 0));
  if (rc) return;
  CHECK(f.addr_len == p[0] && memcmp(f.addr, p + 1, f.addr_len) == 0);
  size_t n = R2S_FRAME_HDR_LEN + len;
  uint8_t *exact = malloc(n), *shy = malloc(n - 1);
  CHECK(exact && shy);
  CHECK(r2s__fetch_encode(&f, shy, n - 1) == -ENOSPC);
  CHECK(r2s__fetch_encode(&f, exact, n) == (int)n);
  r2s_frame_hdr_t h;
  CHECK(parse_hdr(exact, n, &h) == 0 && h.type == R2S_FRAME_FETCH && h.len == len);
  CHECK(memcmp(exact + R2S_FRAME_HDR_LEN, p, len) == 0); /* a fixed point */
  free(exact), free(shy);
}

/* HANDED: exactly a u64 status and a 16-byte nonce. */
static void decode_handed(const uint8_t *p, size_t len)
{
  r2s_handed_t m;
  int rc = r2s__handed_decode(p, len, &m);
  CHECK(rc == 0 || rc == -EPROTO);
  CHECK((rc == 0) == (len == 8 + R2S_NONCE_LEN));
  if (rc) return;
  CHECK(m.status == le64(p) && memcmp(m.nonce, p + 8, R2S_NONCE_LEN) == 0);
  size_t n = R2S_FRAME_HDR_LEN + len;
  uint8_t *exact = malloc(n);
  CHECK(exact != NULL);
  CHECK(r2s__handed_encode(&m, exact, n - 1) == -ENOSPC);
  CHECK(r2s__handed_encode(&m, exact, n) == (int)n);
  CHECK(memcmp(exact + R2S_FRAME_HDR_LEN, p, len) == 0);
  free(exact);
}

/* ---- handshakes ------------------------------------------------------- */

/* Two handshakes say the same: the fixed part, and the same offers in the
 * same order, byte for byte. */
static int hs_equal(const r2s_handshake_t *a, const r2s_handshake_t *b)
{
  if (a->version != b->version || a->min_version != b->min_version || a->caps != b->caps ||
      memcmp(a->boot_id, b->boot_id, sizeof a->boot_id) != 0 || a->netns != b->netns || a->n_offers != b->n_offers)
    return 0;
  for (unsigned i = 0; i < a->n_offers; i++) {
    const r2s_offer_t *x = &a->offers[i], *y = &b->offers[i];
    if (x->kind != y->kind || x->len != y->len || memcmp(x->body, y->body, x->len) != 0) return 0;
  }
  return 1;
}

/* What the shm transport promises to accept as a name (used as a
 * shm_open path). */
static int shm_name_ok(const char *name)
{
  size_t n = strnlen(name, R2S_SHM_NAME_MAX);
  return n < R2S_SHM_NAME_MAX && n >= 2 && name[0] == '/' && memchr(name + 1, '/', n - 1) == NULL;
}

/* The transports' readings of a decoded handshake's offers: only the
 * documented codes, a shm name that is a safe path, and offers that
 * re-encode to what was read. */
static void check_offers(const r2s_handshake_t *h)
{
  r2s_offer_shm_t shm;
  r2s_offer_rdma_t rdma;
  int s = r2s__shm_offer_get(h, &shm), r = r2s__rdma_offer_get(h, &rdma);
  CHECK(s == 0 || s == 1 || s == -EPROTO);
  CHECK(r == 0 || r == 1 || r == -EPROTO);
  if (s == 1) {
    CHECK(shm_name_ok(shm.name));
    r2s_handshake_t again;
    r2s_offer_shm_t back;
    memset(&again, 0, sizeof again);
    CHECK(r2s__shm_offer_put(&again, &shm) == 0);
    CHECK(r2s__shm_offer_get(&again, &back) == 1);
    CHECK(strcmp(back.name, shm.name) == 0 && back.ring_size == shm.ring_size);
  }
  if (r == 1) {
    r2s_handshake_t again;
    r2s_offer_rdma_t back;
    memset(&again, 0, sizeof again);
    CHECK(r2s__rdma_offer_put(&again, &rdma) == 0);
    CHECK(r2s__rdma_offer_get(&again, &back) == 1);
    CHECK(memcmp(&back, &rdma, sizeof back) == 0);
  }
}

static int hs_decode(const uint8_t *p, size_t len, r2s_handshake_t *out)
{
  int rc = r2s__handshake_decode(p, len, out);
  CHECK(rc == 0 || rc == -EPROTO || rc == -EPROTONOSUPPORT);
  if (len < HS_FIXED_LEN || len > R2S_FRAME_CTRL_MAX) {
    CHECK(rc == -EPROTO);
    return rc;
  }
  uint16_t ver = (uint16_t)(p[0] | p[1] << 8), min = (uint16_t)(p[2] | p[3] << 8);
  /* A range that is empty is malformed; one above ours is refused (as
   * malformed too if its offers are, hence only "not accepted"), and
   * "not supported" is said only of such a range. */
  if (min > ver) CHECK(rc == -EPROTO);
  if (min > R2S_PROTO_VERSION) CHECK(rc != 0);
  if (rc == -EPROTONOSUPPORT) CHECK(min <= ver && min > R2S_PROTO_VERSION);
  if (rc == 0) {
    CHECK(out->version == ver && out->min_version == min);
    CHECK(out->caps == le32(p + 4) && out->netns == le64(p + 24));
    CHECK(memcmp(out->boot_id, p + 8, 16) == 0);
    CHECK(out->n_offers <= R2S_OFFERS_MAX);
    for (unsigned i = 0; i < out->n_offers; i++) {
      CHECK(out->offers[i].len <= R2S_OFFER_BODY_MAX);
      for (unsigned j = 0; j < i; j++) CHECK(out->offers[i].kind != out->offers[j].kind);
    }
    check_offers(out);
  }
  return rc;
}

/* h must be a handshake the decoder accepted (or one it will accept). */
static void hs_roundtrip(const r2s_handshake_t *h)
{
  uint8_t big[HS_ENCODE_MAX];
  int n = r2s__handshake_encode(h, big, sizeof big);
  CHECK(n >= R2S_FRAME_HDR_LEN + HS_FIXED_LEN && n <= HS_ENCODE_MAX);
  /* The encoder must fit an exact buffer and refuse one byte less without
   * touching it (ASan watches both). */
  uint8_t *exact = malloc((size_t)n), *shy = malloc((size_t)n - 1);
  CHECK(exact && shy);
  CHECK(r2s__handshake_encode(h, shy, (size_t)n - 1) == -ENOSPC);
  CHECK(r2s__handshake_encode(h, exact, (size_t)n) == n);
  CHECK(memcmp(exact, big, (size_t)n) == 0);
  free(shy);

  r2s_frame_hdr_t fh;
  CHECK(parse_hdr(exact, (size_t)n, &fh) == 0);
  CHECK(fh.type == R2S_FRAME_HANDSHAKE && fh.flags == 0 && fh.len == (uint32_t)n - R2S_FRAME_HDR_LEN);
  uint8_t *pl = dup_exact(exact + R2S_FRAME_HDR_LEN, fh.len);
  r2s_handshake_t h2;
  memset(&h2, 0x5a, sizeof h2);
  CHECK(hs_decode(pl, fh.len, &h2) == 0);
  if (!hs_equal(h, &h2)) {
    fprintf(stderr, "fuzz_frame: handshake changed across encode/decode\n");
    abort();
  }
  /* And the bytes are a fixed point: what decoded re-encodes identically. */
  uint8_t again[HS_ENCODE_MAX];
  CHECK(r2s__handshake_encode(&h2, again, sizeof again) == n);
  CHECK(memcmp(again, exact, (size_t)n) == 0);
  free(pl);
  free(exact);
}

static void decode_handshake(const uint8_t *p, size_t len)
{
  r2s_handshake_t h;
  memset(&h, 0x5a, sizeof h);
  if (hs_decode(p, len, &h) == 0) hs_roundtrip(&h);
}

/* A handshake struct straight from input bytes: exercises the encoder on
 * values no decoder produced (odd versions, any offer bodies). */
static void encode_from_bytes(const uint8_t *data, size_t size)
{
  r2s_handshake_t h;
  if (size < sizeof h) return;
  memcpy(&h, data, sizeof h);
  uint8_t big[HS_ENCODE_MAX];
  int n = r2s__handshake_encode(&h, big, sizeof big);
  /* Only what add_offer could have made is encoded. */
  int sane = h.n_offers <= R2S_OFFERS_MAX;
  for (unsigned i = 0; sane && i < h.n_offers; i++) sane = h.offers[i].len <= R2S_OFFER_BODY_MAX;
  if (!sane) {
    CHECK(n == -EINVAL);
    return;
  }
  CHECK(n >= R2S_FRAME_HDR_LEN + HS_FIXED_LEN && n <= HS_ENCODE_MAX);
  uint8_t *pl = dup_exact(big + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN);
  r2s_handshake_t d;
  int rc = hs_decode(pl, (size_t)n - R2S_FRAME_HDR_LEN, &d);
  free(pl);
  int distinct = 1;
  for (unsigned i = 0; i < h.n_offers; i++)
    for (unsigned j = 0; j < i; j++) distinct &= h.offers[i].kind != h.offers[j].kind;
  int valid = h.min_version <= h.version && h.min_version <= R2S_PROTO_VERSION && distinct;
  CHECK(valid == (rc == 0));
  if (rc == 0) {
    CHECK(hs_equal(&h, &d));
    hs_roundtrip(&d);
  }
}

/* ---- the stream ------------------------------------------------------- */

/* Payloads over the control limit need inputs beyond libFuzzer's max_len;
 * one such call, once, covers the limit check. */
static void check_oversize_once(void)
{
  static int done;
  if (done) return;
  done = 1;
  uint8_t *big = calloc(1, R2S_FRAME_CTRL_MAX + 1);
  CHECK(big != NULL);
  big[0] = R2S_PROTO_VERSION, big[2] = R2S_PROTO_VERSION;
  r2s_handshake_t h;
  CHECK(hs_decode(big, R2S_FRAME_CTRL_MAX + 1, &h) == -EPROTO);
  free(big);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  check_oversize_once();
  size_t off = 0;
  while (off < size) {
    check_prefixes(data + off, size - off);
    r2s_frame_hdr_t h;
    if (parse_hdr(data + off, size - off, &h) != 0) break;
    hdr_roundtrip(&h);
    /* A peer may announce more than it sent: decode what is there, as a
     * receiver given a short buffer would (the decoders take exact
     * lengths, so a short payload must fail cleanly, not over-read). */
    size_t have = size - off - R2S_FRAME_HDR_LEN;
    size_t plen = h.len < have ? h.len : have;
    uint8_t *pl = dup_exact(data + off + R2S_FRAME_HDR_LEN, plen);
    /* Any payload goes to every decoder: a confused receiver state must not
     * turn into a memory error either. */
    decode_handshake(pl, plen);
    decode_u64(h.type, pl, plen);
    decode_fetch(pl, plen);
    decode_handed(pl, plen);
    free(pl);
    off += R2S_FRAME_HDR_LEN + plen;
  }
  encode_from_bytes(data, size);
  return 0;
}

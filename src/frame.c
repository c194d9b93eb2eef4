/* Encoding and checked decoding of the shim's frames. Everything here parses
 * bytes a peer chose; it reads nothing it has not bounds-checked. */
#include "frame.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
  return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t payload_limit(uint8_t type)
{
  return type == R2S_FRAME_DATA ? R2S_FRAME_DATA_MAX : R2S_FRAME_CTRL_MAX;
}

int r2s__frame_hdr_parse(const uint8_t *buf, size_t n, r2s_frame_hdr_t *out)
{
  /* Judge what is there as early as possible: a bad type in byte 0 is bad
   * whether or not the rest has arrived. */
  if (n >= 1 && (buf[0] == 0 || buf[0] > R2S_FRAME_TYPE_MAX)) return -EPROTO;
  if ((n >= 3 && buf[2] != 0) || (n >= 4 && buf[3] != 0)) return -EPROTO;
  if (n < R2S_FRAME_HDR_LEN) return -EAGAIN;
  uint32_t len = get32(buf + 4);
  if (len > payload_limit(buf[0])) return -EPROTO;
  out->type = buf[0];
  out->flags = buf[1];
  out->len = len;
  return 0;
}

int r2s__frame_hdr_put(uint8_t *buf, size_t cap, uint8_t type, uint32_t len)
{
  if (cap < R2S_FRAME_HDR_LEN) return -ENOSPC;
  buf[0] = type;
  buf[1] = 0;
  buf[2] = buf[3] = 0;
  put32(buf + 4, len);
  return R2S_FRAME_HDR_LEN;
}

/* HANDSHAKE payload: fixed part, then offers as (kind u8, len u16, body). */
#define HS_FIXED  (2 + 2 + 4 + 16 + 8)
#define SHM_BODY  (R2S_SHM_NAME_MAX + 8)
#define RDMA_BODY (4 + 4 + 16 + 2 + 1 + 8 + 8 + 4 + 8 + 4)
#define FIT_BODY  8

int r2s__handshake_encode(const r2s_handshake_t *h, uint8_t *buf, size_t cap)
{
  bool fit = h->has_rdma && h->rdma.copy_max;
  size_t len = HS_FIXED + (h->has_shm ? 3 + SHM_BODY : 0) + (h->has_rdma ? 3 + RDMA_BODY : 0) +
               (fit ? 3 + FIT_BODY : 0);
  if (cap < R2S_FRAME_HDR_LEN + len) return -ENOSPC;
  uint8_t *p = buf + R2S_FRAME_HDR_LEN;
  r2s__frame_hdr_put(buf, cap, R2S_FRAME_HANDSHAKE, (uint32_t)len);
  put16(p, h->version), put16(p + 2, h->min_version), put32(p + 4, h->caps);
  memcpy(p + 8, h->boot_id, 16);
  put64(p + 24, h->netns);
  p += HS_FIXED;
  if (h->has_shm) {
    p[0] = R2S_OFFER_SHM;
    put16(p + 1, SHM_BODY);
    memset(p + 3, 0, R2S_SHM_NAME_MAX);
    size_t nl = strnlen(h->shm.name, R2S_SHM_NAME_MAX - 1);
    memcpy(p + 3, h->shm.name, nl);
    put64(p + 3 + R2S_SHM_NAME_MAX, h->shm.ring_size);
    p += 3 + SHM_BODY;
  }
  if (h->has_rdma) {
    const r2s_offer_rdma_t *r = &h->rdma;
    p[0] = R2S_OFFER_RDMA;
    put16(p + 1, RDMA_BODY);
    uint8_t *q = p + 3;
    put32(q, r->qpn), put32(q + 4, r->psn);
    memcpy(q + 8, r->gid, 16);
    put16(q + 24, r->lid);
    q[26] = r->mtu;
    put64(q + 27, r->ring_addr), put64(q + 35, r->ring_size), put32(q + 43, r->ring_rkey);
    put64(q + 47, r->credit_addr), put32(q + 55, r->credit_rkey);
    p += 3 + RDMA_BODY;
  }
  if (fit) {
    p[0] = R2S_OFFER_RDMA_FIT;
    put16(p + 1, FIT_BODY);
    put64(p + 3, h->rdma.copy_max);
    p += 3 + FIT_BODY;
  }
  return (int)(R2S_FRAME_HDR_LEN + len);
}

int r2s__handshake_decode(const uint8_t *buf, size_t len, r2s_handshake_t *out)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  if (len < HS_FIXED || len > R2S_FRAME_CTRL_MAX) return -EPROTO;
  h.version = get16(buf), h.min_version = get16(buf + 2), h.caps = get32(buf + 4);
  memcpy(h.boot_id, buf + 8, 16);
  h.netns = get64(buf + 24);
  if (h.min_version > h.version) return -EPROTO;
  /* Speak the highest version both ends know; today that must be 1. */
  if (h.min_version > R2S_PROTO_VERSION) return -EPROTONOSUPPORT;
  size_t off = HS_FIXED;
  uint64_t fit = 0; /* a FIT offer's value is never 0 */
  while (off < len) {
    if (len - off < 3) return -EPROTO;
    uint8_t kind = buf[off];
    size_t blen = get16(buf + off + 1);
    const uint8_t *b = buf + off + 3;
    if (blen > len - off - 3) return -EPROTO;
    if (kind == R2S_OFFER_SHM) {
      if (blen != SHM_BODY || h.has_shm) return -EPROTO;
      memcpy(h.shm.name, b, R2S_SHM_NAME_MAX);
      /* The name is used as a path: it must be terminated, start with '/'
       * and hold no other '/'. */
      if (h.shm.name[R2S_SHM_NAME_MAX - 1] != 0 || h.shm.name[0] != '/' || strchr(h.shm.name + 1, '/') ||
          h.shm.name[1] == 0)
        return -EPROTO;
      h.shm.ring_size = get64(b + R2S_SHM_NAME_MAX);
      h.has_shm = 1;
    } else if (kind == R2S_OFFER_RDMA) {
      if (blen != RDMA_BODY || h.has_rdma) return -EPROTO;
      r2s_offer_rdma_t *r = &h.rdma;
      r->qpn = get32(b), r->psn = get32(b + 4);
      memcpy(r->gid, b + 8, 16);
      r->lid = get16(b + 24);
      r->mtu = b[26];
      r->ring_addr = get64(b + 27), r->ring_size = get64(b + 35), r->ring_rkey = get32(b + 43);
      r->credit_addr = get64(b + 47), r->credit_rkey = get32(b + 55);
      h.has_rdma = 1;
    } else if (kind == R2S_OFFER_RDMA_FIT) {
      /* 0 would read as "none sent": the transport checks the value */
      if (blen != FIT_BODY || fit) return -EPROTO;
      fit = get64(b);
      if (fit == 0) return -EPROTO;
    }
    /* other kinds: a newer peer's offer we do not know; skip it */
    off += 3 + blen;
  }
  /* A FIT offer means something only beside an RDMA one (in any order). */
  if (h.has_rdma) h.rdma.copy_max = fit;
  *out = h;
  return 0;
}

int r2s__frame_u64_encode(uint8_t type, uint64_t v, uint8_t *buf, size_t cap)
{
  if (cap < R2S_FRAME_HDR_LEN + 8) return -ENOSPC;
  r2s__frame_hdr_put(buf, cap, type, 8);
  put64(buf + R2S_FRAME_HDR_LEN, v);
  return R2S_FRAME_HDR_LEN + 8;
}

int r2s__frame_u64_decode(const uint8_t *payload, size_t len, uint64_t *v)
{
  if (len != 8) return -EPROTO;
  *v = get64(payload);
  return 0;
}

int r2s__fetch_encode(const r2s_fetch_t *f, uint8_t *buf, size_t cap)
{
  size_t len = 1 + (size_t)f->addr_len;
  if (f->addr_len == 0 || f->addr_len > R2S_FETCH_ADDR_MAX) return -EINVAL;
  if (cap < R2S_FRAME_HDR_LEN + len) return -ENOSPC;
  r2s__frame_hdr_put(buf, cap, R2S_FRAME_FETCH, (uint32_t)len);
  buf[R2S_FRAME_HDR_LEN] = f->addr_len;
  memcpy(buf + R2S_FRAME_HDR_LEN + 1, f->addr, f->addr_len);
  return (int)(R2S_FRAME_HDR_LEN + len);
}

int r2s__fetch_decode(const uint8_t *payload, size_t len, r2s_fetch_t *out)
{
  if (len < 2 || len > 1 + R2S_FETCH_ADDR_MAX || payload[0] != len - 1 || payload[1] != 0) return -EPROTO;
  memset(out, 0, sizeof *out);
  out->addr_len = payload[0];
  memcpy(out->addr, payload + 1, out->addr_len);
  return 0;
}

#define HANDED_LEN (8 + R2S_NONCE_LEN)

int r2s__handed_encode(const r2s_handed_t *h, uint8_t *buf, size_t cap)
{
  if (cap < R2S_FRAME_HDR_LEN + HANDED_LEN) return -ENOSPC;
  r2s__frame_hdr_put(buf, cap, R2S_FRAME_HANDED, HANDED_LEN);
  put64(buf + R2S_FRAME_HDR_LEN, h->status);
  memcpy(buf + R2S_FRAME_HDR_LEN + 8, h->nonce, R2S_NONCE_LEN);
  return R2S_FRAME_HDR_LEN + HANDED_LEN;
}

int r2s__handed_decode(const uint8_t *payload, size_t len, r2s_handed_t *out)
{
  if (len != HANDED_LEN) return -EPROTO;
  out->status = get64(payload);
  memcpy(out->nonce, payload + 8, R2S_NONCE_LEN);
  return 0;
}

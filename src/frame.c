/* Encoding and checked decoding of the shim's frames. Everything here parses
 * bytes a peer chose; it reads nothing it has not bounds-checked. */
#include "frame.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "wire.h"

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
  uint32_t len = r2s__get32(buf + 4);
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
  r2s__put32(buf + 4, len);
  return R2S_FRAME_HDR_LEN;
}

/* HANDSHAKE payload: fixed part, then offers as (kind u8, len u16, body). */
#define HS_FIXED (2 + 2 + 4 + 16 + 8)

int r2s__handshake_add_offer(r2s_handshake_t *h, uint8_t kind, const void *body, size_t len)
{
  if (r2s__handshake_offer(h, kind, &(size_t){0})) return -EEXIST;
  if (h->n_offers >= R2S_OFFERS_MAX || len > R2S_OFFER_BODY_MAX) return -ENOSPC;
  r2s_offer_t *o = &h->offers[h->n_offers++];
  o->kind = kind;
  o->len = (uint8_t)len;
  memcpy(o->body, body, len);
  return 0;
}

const uint8_t *r2s__handshake_offer(const r2s_handshake_t *h, uint8_t kind, size_t *len)
{
  for (unsigned i = 0; i < h->n_offers && i < R2S_OFFERS_MAX; i++)
    if (h->offers[i].kind == kind) {
      *len = h->offers[i].len;
      return h->offers[i].body;
    }
  return NULL;
}

int r2s__handshake_encode(const r2s_handshake_t *h, uint8_t *buf, size_t cap)
{
  size_t len = HS_FIXED;
  if (h->n_offers > R2S_OFFERS_MAX) return -EINVAL;
  for (unsigned i = 0; i < h->n_offers; i++) {
    if (h->offers[i].len > R2S_OFFER_BODY_MAX) return -EINVAL;
    len += 3 + h->offers[i].len;
  }
  if (cap < R2S_FRAME_HDR_LEN + len) return -ENOSPC;
  uint8_t *p = buf + R2S_FRAME_HDR_LEN;
  r2s__frame_hdr_put(buf, cap, R2S_FRAME_HANDSHAKE, (uint32_t)len);
  r2s__put16(p, h->version), r2s__put16(p + 2, h->min_version), r2s__put32(p + 4, h->caps);
  memcpy(p + 8, h->boot_id, 16);
  r2s__put64(p + 24, h->netns);
  p += HS_FIXED;
  for (unsigned i = 0; i < h->n_offers; i++) {
    const r2s_offer_t *o = &h->offers[i];
    p[0] = o->kind;
    r2s__put16(p + 1, o->len);
    memcpy(p + 3, o->body, o->len);
    p += 3 + o->len;
  }
  return (int)(R2S_FRAME_HDR_LEN + len);
}

int r2s__handshake_decode(const uint8_t *buf, size_t len, r2s_handshake_t *out)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  if (len < HS_FIXED || len > R2S_FRAME_CTRL_MAX) return -EPROTO;
  h.version = r2s__get16(buf), h.min_version = r2s__get16(buf + 2), h.caps = r2s__get32(buf + 4);
  memcpy(h.boot_id, buf + 8, 16);
  h.netns = r2s__get64(buf + 24);
  if (h.min_version > h.version) return -EPROTO;
  /* Speak the highest version both ends know; today that must be 1. */
  if (h.min_version > R2S_PROTO_VERSION) return -EPROTONOSUPPORT;
  size_t off = HS_FIXED;
  /* Kinds seen, kept or not: one offer of a kind, as the peer means it. */
  uint8_t seen[256 / 8] = {0};
  while (off < len) {
    if (len - off < 3) return -EPROTO;
    uint8_t kind = buf[off];
    size_t blen = r2s__get16(buf + off + 1);
    if (blen > len - off - 3) return -EPROTO;
    if (seen[kind / 8] & (1u << (kind % 8))) return -EPROTO;
    seen[kind / 8] |= (uint8_t)(1u << (kind % 8));
    /* Beyond what we keep: a newer peer's, which no transport of ours reads. */
    if (h.n_offers < R2S_OFFERS_MAX && blen <= R2S_OFFER_BODY_MAX)
      (void)r2s__handshake_add_offer(&h, kind, buf + off + 3, blen);
    off += 3 + blen;
  }
  *out = h;
  return 0;
}

int r2s__frame_u64_encode(uint8_t type, uint64_t v, uint8_t *buf, size_t cap)
{
  if (cap < R2S_FRAME_HDR_LEN + 8) return -ENOSPC;
  r2s__frame_hdr_put(buf, cap, type, 8);
  r2s__put64(buf + R2S_FRAME_HDR_LEN, v);
  return R2S_FRAME_HDR_LEN + 8;
}

int r2s__frame_u64_decode(const uint8_t *payload, size_t len, uint64_t *v)
{
  if (len != 8) return -EPROTO;
  *v = r2s__get64(payload);
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
  r2s__put64(buf + R2S_FRAME_HDR_LEN, h->status);
  memcpy(buf + R2S_FRAME_HDR_LEN + 8, h->nonce, R2S_NONCE_LEN);
  return R2S_FRAME_HDR_LEN + HANDED_LEN;
}

int r2s__handed_decode(const uint8_t *payload, size_t len, r2s_handed_t *out)
{
  if (len != HANDED_LEN) return -EPROTO;
  out->status = r2s__get64(payload);
  memcpy(out->nonce, payload + 8, R2S_NONCE_LEN);
  return 0;
}

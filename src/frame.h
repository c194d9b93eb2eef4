/*
 * frame.h - the bytes r2sock puts on a TCP stream after a direction switched.
 *
 * Contract (docs/protocol.md is the normative text):
 *  - Before the switch a direction carries only application bytes, plus the
 *    urgent hello (R2S_HELLO_BYTE, or R2S_HELLO_SIZED | k) at position 0. At the switch mark
 *    (urgent R2S_SWITCH_BYTE) the direction starts carrying frames, and never
 *    goes back.
 *  - A frame is an 8-byte header (type, flags, 2 reserved bytes that must be
 *    0, u32 little-endian payload length) and the payload.
 *  - Parsers take bytes from the peer, who may lie: every length is checked
 *    against what was received and against a per-type limit before use, and
 *    nothing is read past the buffer given. They return 0, -EAGAIN (a
 *    prefix with nothing wrong in the bytes present: more needed; a length
 *    over the limit is only judged once all 4 bytes are there) or -EPROTO (malformed: the
 *    connection must be reset), or -EPROTONOSUPPORT for a version we do not
 *    speak.
 *  - Encoders never write past `cap` and return the length or -ENOSPC.
 */
#ifndef R2S_FRAME_H
#define R2S_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define R2S_PROTO_VERSION 1
#define R2S_HELLO_BYTE    0x48 /* 'H', urgent, position 0 of each direction */
#define R2S_SWITCH_BYTE   0x55 /* 'U', urgent, where a direction turns to frames */
/* A hello that also says when its sender may switch: R2S_HELLO_SIZED | k
 * (k < 64) promises no switch before the connection moved 2^k application
 * bytes (sent and received together). R2S_HELLO_BYTE promises nothing. */
#define R2S_HELLO_SIZED 0xC0

static inline int r2s__is_hello(int urg)
{
  return urg == R2S_HELLO_BYTE || (urg >= R2S_HELLO_SIZED && urg <= 0xFF);
}
/* An urgent byte of the shim's own, not the application's. */
static inline int r2s__is_shim_urgent(int urg)
{
  return r2s__is_hello(urg) || urg == R2S_SWITCH_BYTE;
}
/* The bytes a connection moves before the hello's sender may switch: 0 if
 * it may at once (or urg is no hello). */
static inline uint64_t r2s__hello_floor(int urg)
{
  return urg >= R2S_HELLO_SIZED && urg <= 0xFF ? (uint64_t)1 << (urg & 63) : 0;
}

enum {
  R2S_FRAME_HANDSHAKE = 1, /* version, host identity, transport offers */
  R2S_FRAME_DATA = 2,      /* application bytes over TCP */
  R2S_FRAME_RING = 3,      /* application bytes continue in the ring at offset u64 */
  R2S_FRAME_DOORBELL = 4,  /* the receiver may have slept: look at the ring */
  R2S_FRAME_CREDIT = 5,    /* consumer index u64 */
  R2S_FRAME_FIN = 6,       /* no more bytes after ring offset u64 */
  R2S_FRAME_DECLINE = 7,   /* reason u64: keep using DATA frames */
  R2S_FRAME_PLAIN = 8,     /* after ring offset u64 this direction is plain TCP again */
  R2S_FRAME_READY = 9,     /* our end of the transport takes your writes now (RDMA) */
  R2S_FRAME_FETCH = 10,    /* hand me your shm ring: my Unix socket's address */
  R2S_FRAME_HANDED = 11,   /* status u64, nonce: the ring went to that socket (or why not) */
  R2S_FRAME_FAILOVER = 12, /* the rings failed; mine holds your stream up to offset u64 */
  R2S_FRAME_TYPE_MAX = 12
};

#define R2S_FRAME_HDR_LEN  8
#define R2S_FRAME_CTRL_MAX (64u << 10) /* payload limit of control frames */
#define R2S_FRAME_DATA_MAX (256u << 10)

typedef struct r2s_frame_hdr_s {
  uint8_t type;
  uint8_t flags;
  uint32_t len; /* payload bytes after the header */
} r2s_frame_hdr_t;

/* Parses a header from the first n bytes of buf (n may be short). */
int r2s__frame_hdr_parse(const uint8_t *buf, size_t n, r2s_frame_hdr_t *out);
/* Writes a header; cap must be >= R2S_FRAME_HDR_LEN. */
int r2s__frame_hdr_put(uint8_t *buf, size_t cap, uint8_t type, uint32_t len);

/* Capabilities (the HANDSHAKE's caps word): what the sender's receiving
 * end understands, so the peer's producer may use it. */
enum {
  /* RDMA data immediates, used in both directions when both ends set it:
   * a sender's data write carries the tail as its immediate, a receiver
   * keeps R2S_RDMA_RECVS receives posted and reports how many it
   * reposted; sleep announcements carry R2S_RDMA_IMM_SLEEP and are
   * solicited (docs/protocol.md, "Transport"). */
  R2S_CAP_RDMA_IMM = 1,
  /* The sender's shared-memory ring, which a peer cannot open by name
   * (another user, a private /dev/shm), can be had as a sealed memfd over
   * a Unix socket: FETCH, HANDED (docs/protocol.md, "Rings by file
   * descriptor"). */
  R2S_CAP_SHM_FD = 2,
  /* The sender's RDMA receiving side learns its peer's close from a
   * write with immediate R2S_RDMA_IMM_SLEEP | 4 and nothing else, so
   * that its producer never writes the tail or producer_closed word,
   * whose order against the data the specification does not promise
   * (docs/protocol.md, "Transport"). Only with R2S_CAP_RDMA_IMM. */
  R2S_CAP_RDMA_CLOSE_IMM = 4,
};
#define R2S_RDMA_RECVS     256u
#define R2S_RDMA_IMM_SLEEP 0x80000000u

/* Offer kinds: each transport owns its own and encodes and decodes their
 * bodies itself (transport.h); the handshake carries them as opaque (kind,
 * length, body). Kinds 128-255 are for transports outside the product
 * (tests, experiments); a peer skips kinds it does not know. */
enum {
  R2S_OFFER_SHM = 1,
  R2S_OFFER_RDMA = 2,
  /* the largest peer ring the RDMA end copies (transport/rdma_fit.h);
   * an older peer skips it as an unknown offer */
  R2S_OFFER_RDMA_FIT = 3,
};

#define R2S_OFFERS_MAX     8
#define R2S_OFFER_BODY_MAX 96

typedef struct r2s_offer_s {
  uint8_t kind;
  uint8_t len;
  uint8_t body[R2S_OFFER_BODY_MAX];
} r2s_offer_t;

typedef struct r2s_handshake_s {
  uint16_t version, min_version;
  uint32_t caps;
  uint8_t boot_id[16]; /* host identity: same boot id and netns = same host */
  uint64_t netns;
  uint8_t n_offers;
  r2s_offer_t offers[R2S_OFFERS_MAX];
} r2s_handshake_t;

/* Adds an offer of `kind` with len bytes of body; -EEXIST if the handshake
 * has one of that kind, -ENOSPC if it has no room. */
int r2s__handshake_add_offer(r2s_handshake_t *h, uint8_t kind, const void *body, size_t len);
/* The body of the handshake's offer of `kind` (its length in *len), or
 * NULL if there is none. */
const uint8_t *r2s__handshake_offer(const r2s_handshake_t *h, uint8_t kind, size_t *len);

/* The whole HANDSHAKE frame (header included) into buf; returns its length,
 * -ENOSPC, or -EINVAL for a handshake no add_offer could have made. */
int r2s__handshake_encode(const r2s_handshake_t *h, uint8_t *buf, size_t cap);
/* Decodes a HANDSHAKE payload of exactly len bytes (header already parsed).
 * Two offers of one kind are a protocol error; offers beyond
 * R2S_OFFERS_MAX, or with a body longer than R2S_OFFER_BODY_MAX, are
 * skipped (a newer peer's). What an offer's body says is its transport's
 * to check (transport.h, check). */
int r2s__handshake_decode(const uint8_t *buf, size_t len, r2s_handshake_t *out);

/* FETCH: the abstract Unix socket (sun_path bytes, the first one NUL) on
 * which the sender of the frame waits for the peer's ring. HANDED: 0 and
 * the nonce the ring's message on that socket carries, or a nonzero errno
 * (the ring did not go, nonce zero). */
#define R2S_FETCH_ADDR_MAX 108 /* sizeof(struct sockaddr_un.sun_path) */
#define R2S_NONCE_LEN      16

typedef struct r2s_fetch_s {
  uint8_t addr_len;
  uint8_t addr[R2S_FETCH_ADDR_MAX];
} r2s_fetch_t;

typedef struct r2s_handed_s {
  uint64_t status;
  uint8_t nonce[R2S_NONCE_LEN];
} r2s_handed_t;

/* Whole frames (header included) into buf; return their length. */
int r2s__fetch_encode(const r2s_fetch_t *f, uint8_t *buf, size_t cap);
int r2s__handed_encode(const r2s_handed_t *h, uint8_t *buf, size_t cap);
/* Payloads of exactly len bytes. A FETCH address must be abstract (a
 * filesystem path would let the peer point us at any socket there) and
 * 1 to R2S_FETCH_ADDR_MAX bytes long. */
int r2s__fetch_decode(const uint8_t *payload, size_t len, r2s_fetch_t *out);
int r2s__handed_decode(const uint8_t *payload, size_t len, r2s_handed_t *out);

/* Frames whose payload is one u64: RING, CREDIT, FIN, DECLINE, PLAIN,
 * FAILOVER. */
int r2s__frame_u64_encode(uint8_t type, uint64_t v, uint8_t *buf, size_t cap);
int r2s__frame_u64_decode(const uint8_t *payload, size_t len, uint64_t *v);

#endif

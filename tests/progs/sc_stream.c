#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sc_stream.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sc_util.h"

enum phase { PH_HDR, PH_DATA, PH_TRAILER, PH_EOF, PH_DONE };

#define SC_MAGIC        0x43533252u /* "R2SC" little-endian */
#define SC_HDR_LEN      32u
#define C2S_TRAILER_LEN 8u
#define S2C_TRAILER_LEN 16u
#define FNV_OFFSET      0xcbf29ce484222325ull
#define FNV_PRIME       0x100000001b3ull

static const char *const phase_names[] = {"header", "data", "trailer", "EOF", "done"};

static void put_le32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint64_t get_le64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* FNV-1a: order-sensitive, so a reordering that keeps the bytes would still
 * change the hash exchanged in the trailers. */
static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
  return h;
}

static uint64_t data_key(const sc_session_t *s, bool c2s)
{
  return sc_mix64(s->p.seed ^ (c2s ? 0x6332730000000000ull : 0x7332630000000000ull));
}

/* Byte i of a direction's data is byte i%8 of mix(key + i/8): every 8-byte
 * word differs, so a duplicated, dropped or shifted chunk never matches. */
static void gen_data(uint64_t key, uint64_t off, uint8_t *dst, size_t n)
{
  while (n > 0) {
    uint64_t word = sc_mix64(key + (off >> 3));
    for (unsigned b = (unsigned)(off & 7); b < 8 && n > 0; b++, n--, off++)
      *dst++ = (uint8_t)(word >> (8 * b));
  }
}

static int vfail(char *buf, size_t len, const char *fmt, va_list ap)
{
  /* Keep the first error: later ones are usually its consequences. */
  if (buf[0] == '\0') vsnprintf(buf, len, fmt, ap);
  return -1;
}

int sc_tx_fail(sc_session_t *s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vfail(s->tx_err, sizeof(s->tx_err), fmt, ap);
  va_end(ap);
  return -1;
}

int sc_rx_fail(sc_session_t *s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vfail(s->rx_err, sizeof(s->rx_err), fmt, ap);
  va_end(ap);
  return -1;
}

const char *sc_session_error(const sc_session_t *s)
{
  return s->rx_err[0] ? s->rx_err : s->tx_err;
}

static void seed_rngs(sc_session_t *s)
{
  uint64_t base = sc_mix64(s->p.seed + (s->role == SC_CLIENT ? 0x100 : 0x200));
  s->tx_rng = sc_mix64(base + 1);
  s->rx_rng = sc_mix64(base + 2);
}

sc_session_t *sc_session_new(enum sc_role role, int fd, unsigned id, const struct sc_params *params)
{
  sc_session_t *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->txbuf = malloc(SC_CHUNK_MAX);
  s->rxbuf = malloc(SC_CHUNK_MAX);
  s->peekbuf = malloc(SC_CHUNK_MAX);
  s->expbuf = malloc(SC_CHUNK_MAX);
  if (!s->txbuf || !s->rxbuf || !s->peekbuf || !s->expbuf) {
    sc_session_free(s);
    return NULL;
  }
  s->role = role;
  s->fd = fd;
  s->id = id;
  s->tx_sum = FNV_OFFSET;
  s->rx_sum = FNV_OFFSET;
  atomic_init(&s->tx_data_done, false);
  atomic_init(&s->rx_complete, false);
  if (role == SC_CLIENT) {
    s->p = *params;
    s->hdr_known = true;
    s->tx_phase = PH_HDR;
    s->rx_phase = PH_DATA;
  } else {
    /* Sizes and calls until the header arrives come from seed 0; the
     * header then reseeds them from the client's seed. */
    s->tx_phase = PH_DATA;
    s->rx_phase = PH_HDR;
  }
  seed_rngs(s);
  return s;
}

void sc_session_free(sc_session_t *s)
{
  if (!s) return;
  free(s->txbuf);
  free(s->rxbuf);
  free(s->peekbuf);
  free(s->expbuf);
  free(s);
}

/* ---- sender ---- */

static uint64_t tx_phase_len(const sc_session_t *s, int phase)
{
  bool client = s->role == SC_CLIENT;
  switch (phase) {
  case PH_HDR:
    return client ? SC_HDR_LEN : 0;
  case PH_DATA:
    return client ? s->p.c2s_bytes : s->p.s2c_bytes;
  case PH_TRAILER:
    return client ? C2S_TRAILER_LEN : S2C_TRAILER_LEN;
  default:
    return 0;
  }
}

static void tx_advance(sc_session_t *s)
{
  /* Phases are never crossed by one buffer, so the buffer is empty here. */
  while (s->tx_phase != PH_DONE && s->tx_off == tx_phase_len(s, s->tx_phase)) {
    if (s->tx_phase == PH_DATA) atomic_store_explicit(&s->tx_data_done, true, memory_order_release);
    s->tx_phase = s->tx_phase == PH_TRAILER ? PH_DONE : s->tx_phase + 1;
    s->tx_off = 0;
  }
}

/* Whether the current phase may be sent now; see the header comment. */
static bool tx_allowed(sc_session_t *s)
{
  if (s->role == SC_CLIENT) {
    tx_advance(s);
    return s->tx_phase != PH_DONE;
  }
  if (!s->hdr_known) return false;
  bool rx_done = atomic_load_explicit(&s->rx_complete, memory_order_acquire);
  if (!rx_done && !(s->p.flags & SC_F_BIDIR)) return false;
  tx_advance(s);
  if (s->tx_phase == PH_TRAILER && !rx_done) return false;
  return s->tx_phase != PH_DONE;
}

static void encode_small(sc_session_t *s, uint8_t *out)
{
  if (s->tx_phase == PH_HDR) {
    put_le32(out, SC_MAGIC);
    put_le32(out + 4, s->p.flags);
    put_le64(out + 8, s->p.seed);
    put_le64(out + 16, s->p.c2s_bytes);
    put_le64(out + 24, s->p.s2c_bytes);
  } else if (s->role == SC_CLIENT) {
    put_le64(out, s->tx_sum);
  } else {
    /* rx_complete was loaded with acquire in tx_allowed, so rx_sum is final. */
    put_le64(out, s->rx_sum);
    put_le64(out + 8, s->tx_sum);
  }
}

size_t sc_tx_peek(sc_session_t *s, size_t want, const uint8_t **data)
{
  if (want == 0) return 0;
  if (s->tx_head == s->tx_len) {
    if (!tx_allowed(s)) return 0;
    uint64_t left = tx_phase_len(s, s->tx_phase) - s->tx_off;
    size_t n = want < SC_CHUNK_MAX ? want : SC_CHUNK_MAX;
    if (n > left) n = (size_t)left;
    if (s->tx_phase == PH_DATA) {
      gen_data(data_key(s, s->role == SC_CLIENT), s->tx_off, s->txbuf, n);
    } else {
      uint8_t small[SC_HDR_LEN];
      encode_small(s, small);
      memcpy(s->txbuf, small + s->tx_off, n);
    }
    s->tx_head = 0;
    s->tx_len = n;
  }
  size_t n = s->tx_len - s->tx_head;
  *data = s->txbuf + s->tx_head;
  return n < want ? n : want;
}

void sc_tx_commit(sc_session_t *s, size_t n)
{
  assert(n <= s->tx_len - s->tx_head);
  if (s->tx_phase == PH_DATA) {
    s->tx_sum = fnv1a(s->tx_sum, s->txbuf + s->tx_head, n);
    s->tx_data_bytes += n;
  }
  s->tx_head += n;
  s->tx_off += n;
  tx_advance(s);
}

bool sc_tx_pending(sc_session_t *s)
{
  return s->tx_head < s->tx_len || tx_allowed(s);
}

bool sc_tx_done(sc_session_t *s)
{
  if (s->role == SC_SERVER && !s->hdr_known) return false;
  tx_advance(s);
  return s->tx_phase == PH_DONE;
}

bool sc_tx_wants_shutdown(sc_session_t *s)
{
  return s->role == SC_CLIENT && (s->p.flags & SC_F_HALFCLOSE) && !s->tx_shut && sc_tx_done(s);
}

/* ---- receiver ---- */

static uint64_t rx_phase_len(const sc_session_t *s, int phase)
{
  bool client = s->role == SC_CLIENT;
  switch (phase) {
  case PH_HDR:
    return client ? 0 : SC_HDR_LEN;
  case PH_DATA:
    return client ? s->p.s2c_bytes : s->p.c2s_bytes;
  case PH_TRAILER:
    return client ? S2C_TRAILER_LEN : C2S_TRAILER_LEN;
  default:
    return 0;
  }
}

static void rx_set_phase(sc_session_t *s, int phase)
{
  s->rx_phase = phase;
  s->rx_off = 0;
  if (phase == PH_DONE) atomic_store_explicit(&s->rx_complete, true, memory_order_release);
}

static void rx_advance(sc_session_t *s)
{
  while (s->rx_phase <= PH_TRAILER && s->rx_off == rx_phase_len(s, s->rx_phase)) {
    int next = s->rx_phase + 1;
    /* The client always expects the server's FIN; the server expects the
     * client's only when it asked for a half-close. */
    if (next == PH_EOF && s->role == SC_SERVER && !(s->p.flags & SC_F_HALFCLOSE)) next = PH_DONE;
    rx_set_phase(s, next);
  }
}

size_t sc_rx_want(const sc_session_t *s)
{
  uint64_t left = 0;

  if (s->rx_phase == PH_HDR)
    left = SC_HDR_LEN - s->rx_off; /* nothing more is known yet */
  else
    for (int ph = s->rx_phase; ph <= PH_TRAILER; ph++)
      left += rx_phase_len(s, ph) - (ph == s->rx_phase ? s->rx_off : 0);
  return left > SC_CHUNK_MAX ? SC_CHUNK_MAX : (size_t)left;
}

bool sc_rx_done(const sc_session_t *s)
{
  return s->rx_phase == PH_DONE;
}

static int parse_header(sc_session_t *s)
{
  const uint8_t *h = s->rx_small;
  uint32_t magic = get_le32(h), flags = get_le32(h + 4);

  if (magic != SC_MAGIC) return sc_rx_fail(s, "bad header magic 0x%08x (expected 0x%08x)", magic, SC_MAGIC);
  if (flags & ~(uint32_t)(SC_F_HALFCLOSE | SC_F_BIDIR | SC_F_ZERO_READS))
    return sc_rx_fail(s, "unknown header flags 0x%x", flags);
  s->p.flags = flags;
  s->p.seed = get_le64(h + 8);
  s->p.c2s_bytes = get_le64(h + 16);
  s->p.s2c_bytes = get_le64(h + 24);
  s->hdr_known = true;
  seed_rngs(s);
  return 0;
}

static int check_trailer(sc_session_t *s)
{
  uint64_t a = get_le64(s->rx_small);

  if (s->role == SC_SERVER) {
    if (a != s->rx_sum)
      return sc_rx_fail(s,
                        "c2s hash mismatch: client sent %016" PRIx64 ", received data hashes to %016" PRIx64,
                        a, s->rx_sum);
    return 0;
  }
  uint64_t b = get_le64(s->rx_small + 8);
  /* The server sends its trailer only after our whole stream reached it, and
   * that follows our last data byte, so tx_sum is final; the flag makes
   * that ordering visible to the memory model too. */
  if (!atomic_load_explicit(&s->tx_data_done, memory_order_acquire))
    return sc_rx_fail(s, "server trailer arrived before our data was all sent");
  if (a != s->tx_sum)
    return sc_rx_fail(s, "server received c2s data hashing to %016" PRIx64 ", we sent %016" PRIx64, a,
                      s->tx_sum);
  if (b != s->rx_sum)
    return sc_rx_fail(s, "s2c hash mismatch: server sent %016" PRIx64 ", received data hashes to %016" PRIx64,
                      b, s->rx_sum);
  return 0;
}

static int verify_data(sc_session_t *s, const uint8_t *p, size_t n)
{
  gen_data(data_key(s, s->role == SC_SERVER), s->rx_off, s->expbuf, n);
  if (memcmp(p, s->expbuf, n) != 0) {
    size_t i = 0;
    while (p[i] == s->expbuf[i]) i++;
    return sc_rx_fail(s, "data mismatch at %s offset %" PRIu64 ": got 0x%02x, expected 0x%02x",
                      s->role == SC_SERVER ? "c2s" : "s2c", s->rx_off + i, p[i], s->expbuf[i]);
  }
  s->rx_sum = fnv1a(s->rx_sum, p, n);
  s->rx_data_bytes += n;
  return 0;
}

int sc_rx_feed(sc_session_t *s, const uint8_t *data, size_t n)
{
  while (n > 0) {
    rx_advance(s);
    if (s->rx_phase >= PH_EOF) return sc_rx_fail(s, "%zu unexpected bytes after the end of the stream", n);
    uint64_t left = rx_phase_len(s, s->rx_phase) - s->rx_off;
    size_t k = n < left ? n : (size_t)left;
    if (s->rx_phase == PH_DATA) {
      if (verify_data(s, data, k) != 0) return -1;
    } else {
      memcpy(s->rx_small + s->rx_off, data, k);
    }
    s->rx_off += k;
    data += k;
    n -= k;
    if (s->rx_off == rx_phase_len(s, s->rx_phase)) {
      if (s->rx_phase == PH_HDR && parse_header(s) != 0) return -1;
      if (s->rx_phase == PH_TRAILER && check_trailer(s) != 0) return -1;
    }
  }
  rx_advance(s);
  return 0;
}

int sc_rx_eof(sc_session_t *s)
{
  rx_advance(s);
  if (s->rx_phase == PH_EOF || s->rx_phase == PH_DONE) {
    rx_set_phase(s, PH_DONE);
    return 0;
  }
  uint64_t missing = s->rx_phase == PH_HDR ? SC_HDR_LEN - s->rx_off : sc_rx_want(s);
  return sc_rx_fail(s, "premature EOF in the %s at offset %" PRIu64 " (%" PRIu64 "%s bytes missing)",
                    phase_names[s->rx_phase], s->rx_off, missing, missing == SC_CHUNK_MAX ? "+" : "");
}

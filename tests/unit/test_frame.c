/* Frame encoding and the checked decoding of bytes a peer chose. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "frame.h"
#include "transport.h"
#include "transport/rdma_offer.h"
#include "transport/shm_offer.h"

static const r2s_offer_shm_t SHM = {"/r2s-0123456789abcdef", 1 << 20};
static const r2s_offer_rdma_t RDMA = {
    .qpn = 0x123456,
    .psn = 0xabcdef,
    .gid = {0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff},
    .lid = 7,
    .mtu = 5,
    .ring_addr = 0x7f0000001000ull,
    .ring_size = 1 << 17,
    .ring_rkey = 0x1111,
    .credit_addr = 0x7f0000002000ull,
    .credit_rkey = 0x2222,
    .copy_max = 16ull << 20, /* sent as its own FIT offer */
};

/* A handshake with the shm offer `shm` (NULL: none) and the RDMA offer
 * `rdma` (NULL: none), in that order, as the transports make them. */
static r2s_handshake_t make(const r2s_offer_shm_t *shm, const r2s_offer_rdma_t *rdma)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  h.version = 1, h.min_version = 1, h.caps = 0xa5;
  for (int i = 0; i < 16; i++) h.boot_id[i] = (uint8_t)(i * 17);
  h.netns = 4026531840ull;
  if (shm) assert_int_equal(r2s__shm_offer_put(&h, shm), 0);
  if (rdma) assert_int_equal(r2s__rdma_offer_put(&h, rdma), 0);
  return h;
}

static r2s_handshake_t sample(void)
{
  return make(&SHM, &RDMA);
}

/* What the link does with a HANDSHAKE payload: decode it, then let every
 * transport check its offers (a malformed one is a lie, as a malformed
 * frame is). */
static int receive(const uint8_t *p, size_t len, r2s_handshake_t *out)
{
  int rc = r2s__handshake_decode(p, len, out);
  return rc < 0 ? rc : r2s__transports_check(out);
}

/* The RDMA offer's FIT value as the transport reads it (0: none). */
static uint64_t copy_max(const r2s_handshake_t *h)
{
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(h, &o) == 1 ? o.copy_max : 0;
}

static bool has_rdma(const r2s_handshake_t *h)
{
  r2s_offer_rdma_t o;
  return r2s__rdma_offer_get(h, &o) == 1;
}

static bool has_shm(const r2s_handshake_t *h)
{
  r2s_offer_shm_t o;
  return r2s__shm_offer_get(h, &o) == 1;
}

static void test_header(void **state)
{
  (void)state;
  uint8_t b[16];
  r2s_frame_hdr_t h;
  assert_int_equal(r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_DATA, 1000), R2S_FRAME_HDR_LEN);
  assert_int_equal(r2s__frame_hdr_parse(b, R2S_FRAME_HDR_LEN, &h), 0);
  assert_int_equal(h.type, R2S_FRAME_DATA);
  assert_int_equal(h.len, 1000);
  for (size_t n = 1; n < R2S_FRAME_HDR_LEN; n++) assert_int_equal(r2s__frame_hdr_parse(b, n, &h), -EAGAIN);
  assert_int_equal(r2s__frame_hdr_put(b, 4, R2S_FRAME_DATA, 1), -ENOSPC);
}

static void test_header_rejects_lies(void **state)
{
  (void)state;
  uint8_t b[R2S_FRAME_HDR_LEN];
  r2s_frame_hdr_t h;
  r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_DATA, R2S_FRAME_DATA_MAX + 1);
  assert_int_equal(r2s__frame_hdr_parse(b, sizeof b, &h), -EPROTO);
  r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_DOORBELL, R2S_FRAME_CTRL_MAX + 1);
  assert_int_equal(r2s__frame_hdr_parse(b, sizeof b, &h), -EPROTO);
  r2s__frame_hdr_put(b, sizeof b, R2S_FRAME_DOORBELL, 0);
  b[2] = 1; /* reserved */
  assert_int_equal(r2s__frame_hdr_parse(b, sizeof b, &h), -EPROTO);
  b[2] = 0;
  b[0] = 0;
  assert_int_equal(r2s__frame_hdr_parse(b, 1, &h), -EPROTO); /* judged on the first byte */
  b[0] = R2S_FRAME_TYPE_MAX + 1;
  assert_int_equal(r2s__frame_hdr_parse(b, sizeof b, &h), -EPROTO);
}

static void test_handshake_round_trip(void **state)
{
  (void)state;
  r2s_handshake_t in = sample(), out;
  uint8_t buf[512];
  int n = r2s__handshake_encode(&in, buf, sizeof buf);
  assert_true(n > R2S_FRAME_HDR_LEN);
  r2s_frame_hdr_t h;
  assert_int_equal(r2s__frame_hdr_parse(buf, (size_t)n, &h), 0);
  assert_int_equal(h.type, R2S_FRAME_HANDSHAKE);
  assert_int_equal(h.len, (uint32_t)n - R2S_FRAME_HDR_LEN);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, h.len, &out), 0);
  assert_int_equal(out.version, 1);
  assert_int_equal(out.caps, 0xa5);
  assert_memory_equal(out.boot_id, in.boot_id, 16);
  assert_int_equal(out.netns, in.netns);
  r2s_offer_shm_t shm;
  r2s_offer_rdma_t rdma;
  assert_int_equal(r2s__shm_offer_get(&out, &shm), 1);
  assert_int_equal(r2s__rdma_offer_get(&out, &rdma), 1);
  assert_string_equal(shm.name, SHM.name);
  assert_int_equal(shm.ring_size, SHM.ring_size);
  assert_memory_equal(&rdma, &RDMA, sizeof rdma);
  assert_int_equal(r2s__handshake_encode(&in, buf, (size_t)n - 1), -ENOSPC);
}

/* Every truncation of a valid handshake is rejected, never read past. */
static void test_handshake_truncated(void **state)
{
  (void)state;
  r2s_handshake_t in = sample(), out;
  uint8_t buf[512];
  int n = r2s__handshake_encode(&in, buf, sizeof buf);
  size_t len = (size_t)n - R2S_FRAME_HDR_LEN;
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t copy[512];
    memcpy(copy, buf + R2S_FRAME_HDR_LEN, cut); /* exactly cut bytes: ASan sees any overread */
    int rc = receive(copy, cut, &out);
    /* Cutting exactly between two offers leaves a valid, shorter handshake
     * (without the FIT offer: an RDMA offer as an older peer sends it). */
    size_t shm_end = 32 + 3 + R2S_SHM_NAME_MAX + 8, rdma_end = shm_end + 3 + 59;
    if (rc == 0) {
      assert_true(cut == 32 || cut == shm_end || cut == rdma_end);
      assert_int_equal(copy_max(&out), 0);
    } else {
      assert_int_equal(rc, -EPROTO);
    }
  }
}

static void test_handshake_rejects_bad_values(void **state)
{
  (void)state;
  r2s_handshake_t in = sample(), out;
  uint8_t buf[512];
  const char *bad_names[] = {"r2s-x", "/", "/a/b"};
  for (size_t i = 0; i < 3; i++) {
    r2s_offer_shm_t bad = SHM;
    strcpy(bad.name, bad_names[i]);
    in = make(&bad, &RDMA);
    int n = r2s__handshake_encode(&in, buf, sizeof buf);
    assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN, &out),
                     -EPROTO);
  }
  /* An unterminated name: 64 non-NUL bytes on the wire. */
  in = sample();
  int n = r2s__handshake_encode(&in, buf, sizeof buf);
  memset(buf + R2S_FRAME_HDR_LEN + 32 + 3 + 1, 'a', R2S_SHM_NAME_MAX - 1);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN, &out),
                   -EPROTO);
  /* A version window we do not speak, and an inverted one. */
  in = sample();
  in.version = 3, in.min_version = 2;
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN, &out),
                   -EPROTONOSUPPORT);
  in.version = 1, in.min_version = 2;
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN, &out),
                   -EPROTO);
  /* A newer peer (version 2, min 1) is fine: we speak 1. */
  in.version = 2, in.min_version = 1;
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN, &out), 0);
}

static void test_handshake_skips_unknown_offer(void **state)
{
  (void)state;
  r2s_handshake_t in = make(&SHM, NULL), out;
  uint8_t buf[512];
  int n = r2s__handshake_encode(&in, buf, sizeof buf);
  /* Append an offer of kind 9 with a 5-byte body. */
  uint8_t extra[8] = {9, 5, 0, 1, 2, 3, 4, 5};
  memcpy(buf + n, extra, sizeof extra);
  size_t len = (size_t)n - R2S_FRAME_HDR_LEN + sizeof extra;
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, len, &out), 0);
  assert_true(has_shm(&out));
  assert_false(has_rdma(&out));
  /* ...but its length may not run past the payload. */
  buf[n + 1] = 6;
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, len, &out), -EPROTO);
  /* A duplicated known offer is a lie too. */
  in = make(&SHM, NULL);
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  size_t off_len = 3 + R2S_SHM_NAME_MAX + 8;
  memcpy(buf + n, buf + n - off_len, off_len);
  assert_int_equal(receive(buf + R2S_FRAME_HDR_LEN, (size_t)n - R2S_FRAME_HDR_LEN + off_len, &out),
                   -EPROTO);
}

/* The FIT offer (the largest peer ring an RDMA end copies): its place,
 * its length and its value are checked; without an RDMA offer it means
 * nothing. */
static void test_handshake_fit_offer(void **state)
{
  (void)state;
  r2s_handshake_t in = make(NULL, &RDMA), out;
  uint8_t buf[512];
  int n = r2s__handshake_encode(&in, buf, sizeof buf);
  size_t len = (size_t)n - R2S_FRAME_HDR_LEN, fit_off = len - 11;
  uint8_t *p = buf + R2S_FRAME_HDR_LEN;
  assert_int_equal(p[fit_off], R2S_OFFER_RDMA_FIT);
  assert_int_equal(receive(p, len, &out), 0);
  assert_int_equal(copy_max(&out), 16ull << 20);
  /* In front of the RDMA offer it counts the same. */
  uint8_t moved[512];
  memcpy(moved, p, 32);
  memcpy(moved + 32, p + fit_off, 11);
  memcpy(moved + 43, p + 32, fit_off - 32);
  assert_int_equal(receive(moved, len, &out), 0);
  assert_int_equal(copy_max(&out), 16ull << 20);
  /* Twice, with a body of another length, or 0 (read as "none sent"). */
  memcpy(p + len, p + fit_off, 11);
  assert_int_equal(receive(p, len + 11, &out), -EPROTO);
  p[fit_off + 1] = 7;
  assert_int_equal(receive(p, len - 1, &out), -EPROTO);
  p[fit_off + 1] = 8;
  memset(p + fit_off + 3, 0, 8);
  assert_int_equal(receive(p, len, &out), -EPROTO);
  /* An RDMA offer without it: an older peer. */
  r2s_offer_rdma_t old = RDMA;
  old.copy_max = 0;
  in = make(NULL, &old);
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  assert_int_equal((size_t)n - R2S_FRAME_HDR_LEN, len - 11);
  assert_int_equal(receive(p, len - 11, &out), 0);
  assert_true(has_rdma(&out));
  assert_int_equal(copy_max(&out), 0);
  /* Alone it is not sent, and when it comes alone it is ignored. */
  in = make(&SHM, NULL);
  n = r2s__handshake_encode(&in, buf, sizeof buf);
  len = (size_t)n - R2S_FRAME_HDR_LEN;
  assert_int_equal(len, 32 + 3 + R2S_SHM_NAME_MAX + 8);
  uint8_t fit[11] = {R2S_OFFER_RDMA_FIT, 8, 0, 0, 0, 0, 1};
  memcpy(p + len, fit, sizeof fit);
  assert_int_equal(receive(p, len + sizeof fit, &out), 0);
  assert_false(has_rdma(&out));
  assert_int_equal(copy_max(&out), 0);
}

static void test_u64_frames(void **state)
{
  (void)state;
  uint8_t b[32];
  uint64_t v = 0;
  assert_int_equal(r2s__frame_u64_encode(R2S_FRAME_RING, 0x0102030405060708ull, b, sizeof b), 16);
  assert_int_equal(r2s__frame_u64_decode(b + R2S_FRAME_HDR_LEN, 8, &v), 0);
  assert_int_equal(v, 0x0102030405060708ull);
  assert_int_equal(b[R2S_FRAME_HDR_LEN], 0x08); /* little-endian on the wire */
  assert_int_equal(r2s__frame_u64_decode(b + R2S_FRAME_HDR_LEN, 7, &v), -EPROTO);
  assert_int_equal(r2s__frame_u64_encode(R2S_FRAME_FIN, 1, b, 15), -ENOSPC);
}

/* FETCH names an abstract Unix socket and nothing else; HANDED is a status
 * and a nonce, exactly. */
static void test_fetch_handed(void **state)
{
  (void)state;
  uint8_t b[R2S_FRAME_HDR_LEN + 1 + R2S_FETCH_ADDR_MAX + 1];
  r2s_frame_hdr_t h;
  r2s_fetch_t f = {.addr_len = 6, .addr = {0, '0', '1', 'a', 'f', '9'}}, g;
  int n = r2s__fetch_encode(&f, b, sizeof b);
  assert_int_equal(n, R2S_FRAME_HDR_LEN + 7);
  assert_int_equal(r2s__frame_hdr_parse(b, (size_t)n, &h), 0);
  assert_int_equal(h.type, R2S_FRAME_FETCH);
  assert_int_equal(h.len, 7);
  assert_int_equal(r2s__fetch_decode(b + R2S_FRAME_HDR_LEN, h.len, &g), 0);
  assert_int_equal(g.addr_len, 6);
  assert_memory_equal(g.addr, f.addr, 6);
  /* the length byte must say what follows */
  b[R2S_FRAME_HDR_LEN] = 5;
  assert_int_equal(r2s__fetch_decode(b + R2S_FRAME_HDR_LEN, 7, &g), -EPROTO);
  b[R2S_FRAME_HDR_LEN] = 6;
  assert_int_equal(r2s__fetch_decode(b + R2S_FRAME_HDR_LEN, 6, &g), -EPROTO);
  /* a filesystem path would let the peer point us at any socket there */
  b[R2S_FRAME_HDR_LEN + 1] = '/';
  assert_int_equal(r2s__fetch_decode(b + R2S_FRAME_HDR_LEN, 7, &g), -EPROTO);
  /* empty, and longer than sun_path */
  uint8_t empty[1] = {0};
  assert_int_equal(r2s__fetch_decode(empty, 1, &g), -EPROTO);
  assert_int_equal(r2s__fetch_decode(empty, 0, &g), -EPROTO);
  uint8_t big[2 + R2S_FETCH_ADDR_MAX] = {R2S_FETCH_ADDR_MAX + 1};
  assert_int_equal(r2s__fetch_decode(big, sizeof big, &g), -EPROTO);
  big[0] = R2S_FETCH_ADDR_MAX;
  assert_int_equal(r2s__fetch_decode(big, sizeof big - 1, &g), 0);
  f.addr_len = 0;
  assert_int_equal(r2s__fetch_encode(&f, b, sizeof b), -EINVAL);
  f.addr_len = 6;
  assert_int_equal(r2s__fetch_encode(&f, b, R2S_FRAME_HDR_LEN + 6), -ENOSPC);

  r2s_handed_t m = {.status = 0x0102030405060708ull}, k;
  for (int i = 0; i < R2S_NONCE_LEN; i++) m.nonce[i] = (uint8_t)(0xe0 + i);
  n = r2s__handed_encode(&m, b, sizeof b);
  assert_int_equal(n, R2S_FRAME_HDR_LEN + 8 + R2S_NONCE_LEN);
  assert_int_equal(r2s__frame_hdr_parse(b, (size_t)n, &h), 0);
  assert_int_equal(h.type, R2S_FRAME_HANDED);
  assert_int_equal(b[R2S_FRAME_HDR_LEN], 0x08); /* little-endian on the wire */
  assert_int_equal(r2s__handed_decode(b + R2S_FRAME_HDR_LEN, h.len, &k), 0);
  assert_true(k.status == m.status);
  assert_memory_equal(k.nonce, m.nonce, R2S_NONCE_LEN);
  assert_int_equal(r2s__handed_decode(b + R2S_FRAME_HDR_LEN, h.len - 1, &k), -EPROTO);
  assert_int_equal(r2s__handed_decode(b + R2S_FRAME_HDR_LEN, h.len + 1, &k), -EPROTO);
  assert_int_equal(r2s__handed_encode(&m, b, R2S_FRAME_HDR_LEN + 8 + R2S_NONCE_LEN - 1), -ENOSPC);
}

/* Every hello byte is told from the switch mark and the application's
 * urgent bytes, and a sized one gives its power of two. */
static void test_hello_bytes(void **state)
{
  (void)state;
  assert_true(r2s__is_hello(R2S_HELLO_BYTE));
  assert_int_equal(r2s__hello_floor(R2S_HELLO_BYTE), 0); /* may switch at once */
  assert_true(r2s__is_hello(R2S_HELLO_SIZED | 16));
  assert_int_equal(r2s__hello_floor(R2S_HELLO_SIZED | 16), 65536);
  assert_int_equal(r2s__hello_floor(R2S_HELLO_SIZED), 1);
  assert_int_equal(r2s__hello_floor(0xFF), 1ull << 63);
  for (int b = 0; b < 0xC0; b++) {
    assert_int_equal(r2s__is_hello(b), b == R2S_HELLO_BYTE);
    assert_int_equal(r2s__hello_floor(b), 0);
  }
  /* What urgent_peek returns when there is no byte. */
  assert_false(r2s__is_hello(-EAGAIN));
  assert_false(r2s__is_hello(-EINVAL));
  assert_int_equal(r2s__hello_floor(-EAGAIN), 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header),
      cmocka_unit_test(test_header_rejects_lies),
      cmocka_unit_test(test_handshake_round_trip),
      cmocka_unit_test(test_handshake_truncated),
      cmocka_unit_test(test_handshake_rejects_bad_values),
      cmocka_unit_test(test_handshake_skips_unknown_offer),
      cmocka_unit_test(test_handshake_fit_offer),
      cmocka_unit_test(test_u64_frames),
      cmocka_unit_test(test_fetch_handed),
      cmocka_unit_test(test_hello_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

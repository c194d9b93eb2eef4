/*
 * lying_peer: a client that speaks r2sock's upgrade protocol
 * (docs/protocol.md) to a shim'd stream_check server and lies in one way per
 * run, chosen by --case. It moves a verified stream_check stream (sc_stream.h)
 * over whatever path the protocol gives it, so the honest cases prove that
 * this program speaks the protocol right, and the lying cases can only pass
 * if the shim really rejects (or safely ignores) the lie.
 *
 * usage: lying_peer --port P --case NAME [--host A] [--bytes N] [--timeout S]
 *        lying_peer --list
 * Prints one line "lying_peer: case NAME: outcome=O bad_inputs=N verified=V"
 * where O is
 *   verified  the whole stream was exchanged and checked (honest or ignored lie)
 *   closed    the server's side ended the connection (EOF or reset) after the lie
 *   died      (die-mid-ring) this program exited in the middle of a ring transfer
 * and exits 0 when the outcome is the one the case expects, 1 otherwise,
 * 3 on its own watchdog.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "transport/shm_offer.h"
#include "transport/rdma_offer.h"
#include "liar_rdma.h"
#include "ring.h"
#include "sc_net.h"
#include "sc_stream.h"
#include "sc_util.h"

#define IN_RING_SIZE (64u << 10) /* the ring we offer the server */
#define PRE_RING_CAP (64u << 10) /* plain-honest, die-mid-ring: stream bytes in DATA frames before RING, at most */

enum expect { EXPECT_VERIFIED, EXPECT_CLOSED };

typedef struct liar_s {
  int fd;
  uint64_t bad; /* lies sent */
  sc_session_t *s;
  /* the server's receive ring, which we produce into */
  void *out_mem;
  size_t out_len;
  r2s_ring_t out;
  bool out_on;
  /* our receive ring, which the server produces into */
  char in_name[R2S_SHM_NAME_MAX];
  void *in_mem;
  size_t in_len;
  r2s_ring_t in;
  bool in_on, in_offered;
  /* the TCP stream from the server: frames after its switch mark */
  uint8_t rbuf[1 << 16];
  size_t rlen;
  uint32_t data_left; /* payload bytes of the DATA frame being read */
  bool tcp_end;       /* EOF or reset seen */
  int tcp_err;
  bool got_hs, got_ring, got_decline;
  bool rx_plain; /* after the server's PLAIN frame: raw TCP again */
  r2s_handshake_t peer_hs;
  r2s_offer_shm_t peer_shm;   /* its offers, as the transports read them */
  r2s_offer_rdma_t peer_rdma; /* (zero where it made none) */
  bool peer_offered;          /* ... of the transport this case speaks */
  /* frames bytes waiting to be sent */
  uint8_t tbuf[(1 << 16) + 64];
  size_t tlen;
  bool stall_rx; /* stop taking bytes from our ring (no credits) */
  bool tx_on;    /* our switch mark is out: the stream may flow */
  bool tx_plain; /* after our PLAIN frame: raw TCP again */
  uint64_t tx_cap; /* if set: stream bytes sent before the lie, at most (the
                      server must still be reading when it comes) */
  /* RDMA cases (rdma-*): our queue pair; the rings above are then our
   * receive ring (registered) and our copy of the server's ring, whose
   * control page's consumer line is the credit line the server writes */
  liar_rdma_t *rd;
  uint8_t *out_ctl;
  bool got_ready;
  int rd_status;                         /* first failed completion of the stream */
  void (*bend)(r2s_offer_rdma_t *offer); /* a lie in our offer */
  uint32_t caps;                         /* our HANDSHAKE's capabilities */
  /* Rings by descriptor (fetch-*, handed-*; docs/protocol.md): our
   * listener while we ask for the server's ring (-1: none), what the
   * server answered, and its FETCH when it asks for ours. */
  int fetch_lfd;
  bool asked, got_handed, got_fetch;
  r2s_handed_t handed;
  r2s_fetch_t fetch;
  uint64_t in_ring_bytes; /* stream bytes the server sent through our ring */
} liar_t;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- TCP ---- */

static bool flush_tcp(liar_t *l);

/* Sends all of p, after the DATA frame still queued in tbuf (a frame must
 * not land inside another one's payload). */
static void send_all(liar_t *l, const void *p, size_t n, int flags)
{
  const uint8_t *b = p;
  while (l->tlen && !l->tcp_end && !flush_tcp(l)) {
    struct pollfd pf = {l->fd, POLLOUT, 0};
    poll(&pf, 1, 10);
  }
  while (n) {
    ssize_t k = send(l->fd, b, n, flags | MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      if (errno == EAGAIN) {
        struct pollfd pf = {l->fd, POLLOUT, 0};
        poll(&pf, 1, 10);
        continue;
      }
      /* the server may have reset us already: that is an outcome, not an error */
      l->tcp_end = true;
      l->tcp_err = errno;
      return;
    }
    b += k, n -= (size_t)k;
  }
}

static void send_urgent(liar_t *l, uint8_t c)
{
  send_all(l, &c, 1, MSG_OOB);
}

static void send_u64(liar_t *l, uint8_t type, uint64_t v)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode(type, v, f, sizeof f);
  send_all(l, f, sizeof f, 0);
}

static void send_hdr(liar_t *l, uint8_t type, uint32_t len)
{
  uint8_t h[R2S_FRAME_HDR_LEN];
  r2s__frame_hdr_put(h, sizeof h, type, len);
  send_all(l, h, sizeof h, 0);
}

/* This host's identity as the shim reads it (hostid.c): boot id and
 * network namespace, so that our offers reach. */
static void host_identity(uint8_t boot_id[16], uint64_t *netns)
{
  char txt[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f || !fgets(txt, sizeof txt, f)) sc_die(SC_EXIT_FAIL, "lying_peer: no boot id");
  fclose(f);
  int k = 0;
  for (char *p = txt; *p && k < 16; p++) {
    if (*p == '-') continue;
    if (sscanf(p, "%2hhx", &boot_id[k]) != 1) break;
    k++, p++;
  }
  struct stat sb;
  if (k != 16 || stat("/proc/self/ns/net", &sb) < 0) sc_die(SC_EXIT_FAIL, "lying_peer: no host identity");
  *netns = sb.st_ino;
}

/* Our shared-memory offer: the ring named `name`, of size bytes. */
static void shm_offer(r2s_handshake_t *h, const char *name, uint64_t size)
{
  r2s_offer_shm_t o = {.ring_size = size};
  memcpy(o.name, name, sizeof o.name);
  (void)r2s__shm_offer_put(h, &o);
}

/* The HANDSHAKE this end sends: the peer's host identity (so shared memory
 * reaches), our ring if offer is set. */
static int make_handshake(liar_t *l, bool offer, uint8_t *buf, size_t cap)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  h.version = h.min_version = R2S_PROTO_VERSION;
  h.caps = l->caps;
  host_identity(h.boot_id, &h.netns);
  if (offer && l->rd) {
    r2s_offer_rdma_t o;
    memset(&o, 0, sizeof o);
    lr_offer(l->rd, &o);
    if (l->bend) l->bend(&o);
    (void)r2s__rdma_offer_put(&h, &o);
  } else if (offer) {
    shm_offer(&h, l->in_name, IN_RING_SIZE);
  }
  return r2s__handshake_encode(&h, buf, cap);
}

/* ---- shared memory ---- */

/* A segment the way the shim makes them, or bent by the case: mode, data
 * size (bytes of ring after the control page). */
static int make_segment(const char *name, mode_t mode, size_t data, void **mem, size_t *len)
{
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, mode);
  if (fd < 0) return -errno;
  (void)fchmod(fd, mode); /* past the umask */
  *len = R2S_RING_CTL_SIZE + data;
  if (ftruncate(fd, (off_t)*len) < 0) {
    close(fd);
    return -errno;
  }
  *mem = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (*mem == MAP_FAILED) return -errno;
  memset(*mem, 0, R2S_RING_CTL_SIZE);
  return 0;
}

static void in_ring_name(liar_t *l)
{
  uint32_t r = 0;
  (void)getrandom(&r, sizeof r, 0);
  snprintf(l->in_name, sizeof l->in_name, "/r2s-%d-liar%08x", (int)getpid(), r);
}

static int offer_in_ring(liar_t *l)
{
  if (l->rd) { /* registered by lr_open */
    r2s__ring_attach(&l->in, l->in_mem, IN_RING_SIZE);
    l->in_offered = true;
    return 0;
  }
  in_ring_name(l);
  int rc = make_segment(l->in_name, 0600, IN_RING_SIZE, &l->in_mem, &l->in_len);
  if (rc < 0) return rc;
  r2s__ring_attach(&l->in, l->in_mem, IN_RING_SIZE);
  l->in_offered = true;
  return 0;
}

static int map_out_ring(liar_t *l)
{
  if (l->rd) {
    uint8_t *data;
    if (lr_attach_out(l->rd, &data) < 0 ||
        r2s__ring_attach_split(&l->out, l->out_ctl, data, lr_peer(l->rd)->ring_size) < 0)
      return -ENOMEM;
    l->out_on = true;
    return 0;
  }
  int fd = shm_open(l->peer_shm.name, O_RDWR, 0);
  if (fd < 0) return -errno;
  l->out_len = r2s__ring_bytes(l->peer_shm.ring_size);
  l->out_mem = mmap(NULL, l->out_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (l->out_mem == MAP_FAILED) return -errno;
  shm_unlink(l->peer_shm.name);
  if (r2s__ring_attach(&l->out, l->out_mem, l->peer_shm.ring_size) < 0) return -EINVAL;
  l->out_on = true;
  return 0;
}

/* The sleeping words of docs/protocol.md: a peer about to sleep set its
 * word; whoever moved bytes takes it and rings. */
static bool take_word(uint32_t *w)
{
  return __atomic_load_n(w, __ATOMIC_SEQ_CST) && __atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST);
}

/* ---- receiving: the server's frames ---- */

static void feed(liar_t *l, const uint8_t *p, size_t n)
{
  while (n) {
    size_t want = sc_rx_want(l->s);
    size_t k = want && want < n ? want : n; /* more than wanted: let the session say so */
    if (sc_rx_feed(l->s, p, k) != 0) return;
    p += k, n -= k;
  }
}

/* Parses what rbuf holds. Returns false on a frame this client cannot
 * accept (the server broke the protocol: a test failure). */
static bool parse(liar_t *l)
{
  size_t off = 0;
  while (off < l->rlen) {
    if (l->rx_plain) {
      feed(l, l->rbuf + off, l->rlen - off);
      off = l->rlen;
      break;
    }
    if (l->data_left) {
      size_t k = l->rlen - off < l->data_left ? l->rlen - off : l->data_left;
      feed(l, l->rbuf + off, k);
      off += k, l->data_left -= (uint32_t)k;
      continue;
    }
    r2s_frame_hdr_t h;
    int rc = r2s__frame_hdr_parse(l->rbuf + off, l->rlen - off, &h);
    if (rc == -EAGAIN) break;
    if (rc < 0) {
      fprintf(stderr, "lying_peer: the server sent a bad frame header (%s)\n", strerror(-rc));
      return false;
    }
    if (h.type == R2S_FRAME_DATA) {
      off += R2S_FRAME_HDR_LEN;
      l->data_left = h.len;
      continue;
    }
    if (l->rlen - off < R2S_FRAME_HDR_LEN + h.len) break;
    const uint8_t *pl = l->rbuf + off + R2S_FRAME_HDR_LEN;
    uint64_t v = 0;
    if (h.type == R2S_FRAME_HANDSHAKE) {
      if (r2s__handshake_decode(pl, h.len, &l->peer_hs) < 0) return false;
      int shm = r2s__shm_offer_get(&l->peer_hs, &l->peer_shm);
      int rdma = r2s__rdma_offer_get(&l->peer_hs, &l->peer_rdma);
      if (shm < 0 || rdma < 0) return false;
      l->peer_offered = l->rd ? rdma == 1 : shm == 1;
      l->got_hs = true;
    } else if (h.type == R2S_FRAME_RING) {
      if (r2s__frame_u64_decode(pl, h.len, &v) < 0 || v != 0 || !l->in_offered) return false;
      l->got_ring = l->in_on = true;
    } else if (h.type == R2S_FRAME_DECLINE) {
      l->got_decline = true;
    } else if (h.type == R2S_FRAME_READY) {
      l->got_ready = true;
    } else if (h.type == R2S_FRAME_HANDED) {
      /* Only an answer to our FETCH, once. */
      if (!l->asked || l->got_handed || r2s__handed_decode(pl, h.len, &l->handed) < 0) return false;
      l->got_handed = true;
    } else if (h.type == R2S_FRAME_FETCH) {
      /* Only from a server told that our ring comes by descriptor, once. */
      if (!(l->caps & R2S_CAP_SHM_FD) || l->got_fetch || r2s__fetch_decode(pl, h.len, &l->fetch) < 0)
        return false;
      l->got_fetch = true;
    } else if (h.type == R2S_FRAME_PLAIN) {
      /* Only where the server declined our ring and never wrote into one:
       * the stream goes on raw at once. */
      if (r2s__frame_u64_decode(pl, h.len, &v) < 0 || v != 0 || l->in_on || !l->got_decline) return false;
      l->rx_plain = true;
    }
    off += R2S_FRAME_HDR_LEN + h.len;
  }
  memmove(l->rbuf, l->rbuf + off, l->rlen - off);
  l->rlen -= off;
  return true;
}

/* Reads what TCP has (nonblocking); false on a protocol violation. */
static bool pump(liar_t *l)
{
  while (!l->tcp_end && l->rlen < sizeof l->rbuf) {
    ssize_t n = recv(l->fd, l->rbuf + l->rlen, sizeof l->rbuf - l->rlen, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      l->tcp_end = true;
      l->tcp_err = n < 0 ? errno : 0;
      break;
    }
    l->rlen += (size_t)n;
    if (!parse(l)) return false;
  }
  return parse(l);
}

/* ---- the stream, over frames or rings ---- */

static bool flush_tcp(liar_t *l)
{
  while (l->tlen) {
    ssize_t n = send(l->fd, l->tbuf, l->tlen, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) return false;
    if (n < 0) {
      l->tcp_end = true;
      l->tcp_err = errno;
      l->tlen = 0;
      return false;
    }
    memmove(l->tbuf, l->tbuf + n, l->tlen - (size_t)n);
    l->tlen -= (size_t)n;
  }
  return true;
}

/* One round of moving bytes; returns whether anything moved. */
static bool step(liar_t *l, bool *proto_ok)
{
  bool moved = false;
  size_t before = l->rlen;
  *proto_ok = pump(l);
  if (l->rlen != before || l->tcp_end) moved = true;
  bool capped = l->tx_cap && l->s->tx_data_bytes >= l->tx_cap;
  if (l->tx_on && !capped && !sc_tx_done(l->s) && flush_tcp(l)) {
    const uint8_t *d;
    size_t n = sc_tx_peek(l->s, 1 << 16, &d);
    if (n && l->tx_plain) {
      memcpy(l->tbuf, d, n);
      l->tlen = n;
      sc_tx_commit(l->s, n);
      moved = true;
      flush_tcp(l);
    } else if (n && l->out_on) {
      struct iovec v = {(void *)d, n};
      uint64_t from = l->out.tail;
      ssize_t k = r2s__ring_put(&l->out, &v, 1, 0, n);
      if (k > 0 && l->rd) {
        /* Into the server's ring, then always a doorbell: an honest
         * shim rings only when the reader announced that it sleeps, but
         * doorbells are harmless and this keeps the liar simple. */
        int st = lr_put(l->rd, from, l->out.tail);
        if (st != 0 && !l->rd_status) l->rd_status = st;
        if (st != 0) l->out_on = false;
        send_hdr(l, R2S_FRAME_DOORBELL, 0);
      }
      if (k > 0) {
        sc_tx_commit(l->s, (size_t)k);
        moved = true;
        if (!l->rd && take_word(&l->out.ctl->consumer_sleeping)) send_hdr(l, R2S_FRAME_DOORBELL, 0);
      }
    } else if (n) {
      r2s__frame_hdr_put(l->tbuf, sizeof l->tbuf, R2S_FRAME_DATA, (uint32_t)n);
      memcpy(l->tbuf + R2S_FRAME_HDR_LEN, d, n);
      l->tlen = R2S_FRAME_HDR_LEN + n;
      sc_tx_commit(l->s, n);
      moved = true;
      flush_tcp(l);
    }
  } else if (l->tlen) {
    flush_tcp(l);
  }
  if (l->rd && lr_reap_recvs(l->rd) > 0) moved = true; /* the server's sleep announcements */
  if (l->in_on && !l->stall_rx) {
    size_t want = sc_rx_want(l->s);
    if (want) {
      struct iovec v = {l->s->rxbuf, want < SC_CHUNK_MAX ? want : SC_CHUNK_MAX};
      ssize_t k = r2s__ring_get(&l->in, &v, 1, v.iov_len, false);
      if (k > 0) {
        feed(l, l->s->rxbuf, (size_t)k);
        l->in_ring_bytes += (uint64_t)k;
        moved = true;
        /* The credit into the server's credit line, and a doorbell as
         * above; not once we hold the server's last byte: it may be gone
         * then, with its queue pair, and rxe then leaves our write without
         * a completion for over 10 s (seen). */
        if (l->rd && sc_rx_want(l->s) > 0 && !__atomic_load_n(&l->in.ctl->producer_closed, __ATOMIC_ACQUIRE)) {
          uint64_t head = l->in.head;
          const lr_peer_t *pr = lr_peer(l->rd);
          int st = lr_write(l->rd, &head, 8, pr->credit, pr->credit_rkey, -1);
          if (st != 0 && !l->rd_status) l->rd_status = st;
          if (!l->tx_plain) send_hdr(l, R2S_FRAME_DOORBELL, 0);
        }
        /* after our PLAIN, our direction carries no frames: a sleeping
         * producer finds the room when its sleep times out */
        if (!l->rd && !l->tx_plain && take_word(&l->in.ctl->producer_sleeping))
          send_hdr(l, R2S_FRAME_DOORBELL, 0);
      }
    }
  }
  /* the end of the stream comes after every ring byte */
  if (l->tcp_end && !sc_rx_done(l->s) && sc_rx_want(l->s) == 0 &&
      (!l->in_on || r2s__ring_avail(&l->in) == 0))
    sc_rx_eof(l->s);
  return moved;
}

static void wait_a_little(liar_t *l)
{
  struct pollfd pf = {l->fd, POLLIN | (l->tlen ? POLLOUT : 0), 0};
  poll(&pf, 1, l->in_on || l->out_on ? 1 : 20);
}

/* Runs the stream until done() or the end of the connection. */
static bool run_until(liar_t *l, bool (*done)(liar_t *), double secs)
{
  double end = now_s() + secs;
  while (!done(l)) {
    bool ok;
    if (!step(l, &ok)) wait_a_little(l);
    if (!ok) return false;
    if (l->tcp_end && !l->in_on) break;
    if (sc_session_error(l->s)[0] || now_s() > end) break;
    if (l->tcp_end && sc_rx_done(l->s)) break;
  }
  return done(l);
}

static bool stream_done(liar_t *l)
{
  return sc_rx_done(l->s) && sc_tx_done(l->s);
}
static bool have_hs(liar_t *l)
{
  return l->got_hs;
}
static bool ring_or_decline(liar_t *l)
{
  return l->got_ring || l->got_decline;
}
static bool header_sent(liar_t *l)
{
  return l->s->tx_data_bytes >= 4096;
}
static bool server_consumed(liar_t *l)
{
  return l->out_on && __atomic_load_n(&l->out.ctl->head, __ATOMIC_ACQUIRE) >= 4096;
}
static bool server_produced(liar_t *l)
{
  return l->in_on && __atomic_load_n(&l->in.ctl->tail, __ATOMIC_ACQUIRE) >= 4096;
}
static bool consumed_a_ring(liar_t *l)
{
  return l->in_on && l->in.head > IN_RING_SIZE + 4096;
}
static bool tx_done(liar_t *l)
{
  return sc_tx_done(l->s) && l->tlen == 0;
}
static bool in_ring_full(liar_t *l)
{
  return l->in_on && r2s__ring_avail(&l->in) == (ssize_t)IN_RING_SIZE;
}

/* After a lie: the server's side must end the connection. Keeps reading
 * (and dropping) what comes, so a reset is not caused by our own unread
 * bytes. */
static bool await_close(liar_t *l, double secs)
{
  double end = now_s() + secs;
  while (!l->tcp_end && now_s() < end) {
    uint8_t junk[65536];
    ssize_t n = recv(l->fd, junk, sizeof junk, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      l->tcp_end = true;
      l->tcp_err = n < 0 ? errno : 0;
      break;
    }
    if (n < 0) {
      struct pollfd pf = {l->fd, POLLIN, 0};
      poll(&pf, 1, 50);
    }
  }
  return l->tcp_end;
}

/* ---- the protocol, honest parts ---- */

/* Our hello. A shim switches its own send direction when it notices a
 * peer's hello, which a server that only polls for POLLIN does once our
 * switch mark and frames arrive: so, like a shim client, we switch first. */
static bool hello(liar_t *l)
{
  send_urgent(l, R2S_HELLO_BYTE);
  return true;
}

static bool await_hs(liar_t *l)
{
  return run_until(l, have_hs, 10) && l->peer_offered;
}

/* Our switch mark and an honest HANDSHAKE (with our ring if offer). */
static void switch_mark(liar_t *l, bool offer)
{
  uint8_t hs[256];
  if (offer && offer_in_ring(l) < 0) sc_die(SC_EXIT_FAIL, "lying_peer: cannot make a ring: %s", strerror(errno));
  int n = make_handshake(l, offer, hs, sizeof hs);
  send_urgent(l, R2S_SWITCH_BYTE);
  send_all(l, hs, (size_t)n, 0);
  l->tx_on = true;
}

/* Both directions into rings, as a shim would. */
static bool honest_rings(liar_t *l)
{
  if (!hello(l)) return false;
  switch_mark(l, true);
  if (!await_hs(l) || !run_until(l, ring_or_decline, 10) || !l->got_ring) return false;
  if (map_out_ring(l) < 0) return false;
  send_u64(l, R2S_FRAME_RING, 0);
  return true;
}

/* ---- rings by file descriptor (FETCH, HANDED: src/transport/shm_fd.h) ---- */

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif
/* What a ring handed over must be sealed with: its size can neither shrink
 * (a SIGBUS in the end that maps it) nor grow, and the seals cannot change. */
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static bool have_handed(liar_t *l)
{
  return l->got_handed;
}
static bool have_fetch(liar_t *l)
{
  return l->got_fetch;
}

/* A listening Unix socket with an abstract name the kernel picks, as the
 * shim's taker makes one; *ask gets its address. Nonblocking: a look for a
 * connection never waits. */
static int fd_listen(r2s_fetch_t *ask)
{
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  socklen_t len = sizeof sa;
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa_family_t)) < 0 || listen(fd, 16) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
    sc_die(SC_EXIT_FAIL, "lying_peer: a Unix listener: %s", strerror(errno));
  memset(ask, 0, sizeof *ask);
  ask->addr_len = (uint8_t)(len - offsetof(struct sockaddr_un, sun_path));
  memcpy(ask->addr, sa.sun_path, ask->addr_len);
  return fd;
}

static void send_fetch(liar_t *l, const r2s_fetch_t *ask)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 1 + R2S_FETCH_ADDR_MAX];
  int n = r2s__fetch_encode(ask, f, sizeof f);
  if (n < 0) sc_die(SC_EXIT_FAIL, "lying_peer: FETCH encode: %s", strerror(-n));
  l->asked = true;
  send_all(l, f, (size_t)n, 0);
}

static void send_handed(liar_t *l, uint64_t status, const uint8_t nonce[R2S_NONCE_LEN])
{
  r2s_handed_t h = {.status = status};
  uint8_t f[R2S_FRAME_HDR_LEN + 8 + R2S_NONCE_LEN];
  memcpy(h.nonce, nonce, R2S_NONCE_LEN);
  int n = r2s__handed_encode(&h, f, sizeof f);
  if (n < 0) sc_die(SC_EXIT_FAIL, "lying_peer: HANDED encode: %s", strerror(-n));
  send_all(l, f, (size_t)n, 0);
}

/* A lie must not have made the server connect to the socket it named. */
static void expect_no_connection(int lfd, bool *ok)
{
  int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c >= 0) {
    fprintf(stderr, "lying_peer: the server connected to the socket of a FETCH it had to refuse\n");
    *ok = false;
    close(c);
  }
}

/* The descriptor that came on our listener alone and with exactly the
 * nonce, as the shim's taker looks for it; -1 if none did. The server
 * connected and sent before it sent HANDED, so all of it is queued. */
static int take_ring_fd(int lfd, const uint8_t nonce[R2S_NONCE_LEN])
{
  int c;
  while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
    uint8_t got[R2S_NONCE_LEN + 1];
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(4 * sizeof(int))];
    } cm;
    struct iovec v = {got, sizeof got};
    struct msghdr m = {
        .msg_iov = &v, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    ssize_t n = recvmsg(c, &m, MSG_CMSG_CLOEXEC);
    close(c);
    int fds[4], nfd = 0;
    for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
        for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfd < 4; i++)
          memcpy(&fds[nfd++], CMSG_DATA(h) + i * sizeof(int), sizeof(int));
    if (n == R2S_NONCE_LEN && nfd == 1 && !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
        memcmp(got, nonce, R2S_NONCE_LEN) == 0)
      return fds[0];
    for (int i = 0; i < nfd; i++) close(fds[i]);
  }
  return -1;
}

/* A ring the shim hands over must be what its taker demands of one: sealed
 * (RING_SEALS, and writable), a regular file of exactly `bytes`. */
static bool ring_fd_ok(int fd, size_t bytes)
{
  struct stat sb;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & RING_SEALS) != RING_SEALS || (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))) {
    fprintf(stderr, "lying_peer: the server's ring came with seals %#x, not %#x\n", (unsigned)seals,
            RING_SEALS);
    return false;
  }
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != bytes) {
    fprintf(stderr, "lying_peer: the server's ring came as a file of %lld bytes, not %zu\n",
            (long long)sb.st_size, bytes);
    return false;
  }
  return true;
}

/* The honest taker: asks for the server's ring by descriptor, takes it as
 * the shim would, checks it, maps it as the ring we produce into (RING not
 * sent yet). Returns the descriptor (the caller closes it), -1 on failure. */
static int fetch_server_ring(liar_t *l)
{
  r2s_fetch_t ask;
  if (!(l->peer_hs.caps & R2S_CAP_SHM_FD)) {
    fprintf(stderr, "lying_peer: the server's HANDSHAKE does not offer its ring by descriptor\n");
    return -1;
  }
  l->fetch_lfd = fd_listen(&ask);
  send_fetch(l, &ask);
  if (!run_until(l, have_handed, 10) || l->handed.status != 0) {
    fprintf(stderr, "lying_peer: no HANDED from the server, or a failed one (status %" PRIu64 ")\n",
            l->handed.status);
    return -1;
  }
  int fd = take_ring_fd(l->fetch_lfd, l->handed.nonce);
  close(l->fetch_lfd);
  l->fetch_lfd = -1;
  size_t bytes = r2s__ring_bytes(l->peer_shm.ring_size);
  if (fd < 0) fprintf(stderr, "lying_peer: no message with the HANDED nonce and one descriptor came\n");
  if (fd < 0 || !ring_fd_ok(fd, bytes)) goto err_close;
  /* The owner moved its ring out of the named segment: the name must be
   * gone, or anyone of its user could still open the ring. */
  int named = shm_open(l->peer_shm.name, O_RDWR, 0);
  if (named >= 0 || errno != ENOENT) {
    fprintf(stderr, "lying_peer: the server's segment can still be opened by name after it handed it over\n");
    if (named >= 0) close(named);
    goto err_close;
  }
  l->out_len = bytes;
  l->out_mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (l->out_mem == MAP_FAILED || r2s__ring_attach(&l->out, l->out_mem, l->peer_shm.ring_size) < 0) {
    fprintf(stderr, "lying_peer: cannot map the server's ring: %s\n", strerror(errno));
    goto err_close;
  }
  l->out_on = true;
  return fd;
err_close:
  if (fd >= 0) close(fd);
  return -1;
}

/* A memfd of `bytes` with the seals given, to hand over as a ring of ours. */
static int ring_memfd(size_t bytes, unsigned seals)
{
  int fd = memfd_create("lying-peer-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0 || (seals && fcntl(fd, F_ADD_SEALS, seals) < 0))
    sc_die(SC_EXIT_FAIL, "lying_peer: memfd: %s", strerror(errno));
  return fd;
}

/* A POSIX shared-memory segment as the shim makes them (0600, the size of
 * a ring), unlinked at once, as a ring of ours to hand over. */
static int ring_shm_file(size_t bytes)
{
  char name[R2S_SHM_NAME_MAX];
  uint32_t r = 0;
  (void)getrandom(&r, sizeof r, 0);
  snprintf(name, sizeof name, "/r2s-%d-liarfd%08x", (int)getpid(), r);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0)
    sc_die(SC_EXIT_FAIL, "lying_peer: shm_open: %s", strerror(errno));
  shm_unlink(name);
  return fd;
}

/* The owner's half: connects to the address of the server's FETCH and
 * sends one message, `len` bytes of nonce and the nfd descriptors fds. */
static int hand_fds(const r2s_fetch_t *to, const uint8_t *nonce, size_t len, const int *fds, int nfd)
{
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, to->addr, to->addr_len);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + to->addr_len)) < 0) {
    int err = errno;
    if (s >= 0) close(s);
    return -err;
  }
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } cm;
  memset(&cm, 0, sizeof cm);
  struct iovec v = {(void *)nonce, len};
  struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
  if (nfd > 0) {
    m.msg_control = cm.buf;
    m.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
    memcpy(CMSG_DATA(h), fds, (size_t)nfd * sizeof(int));
  }
  ssize_t n = sendmsg(s, &m, MSG_NOSIGNAL);
  int err = n == (ssize_t)len ? 0 : n < 0 ? errno : EIO;
  close(s);
  return -err;
}

/* Our receive ring in the memfd fd, ready for the server's RING. */
static void in_ring_at(liar_t *l, int fd)
{
  l->in_len = r2s__ring_bytes(IN_RING_SIZE);
  l->in_mem = mmap(NULL, l->in_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (l->in_mem == MAP_FAILED || r2s__ring_attach(&l->in, l->in_mem, IN_RING_SIZE) < 0)
    sc_die(SC_EXIT_FAIL, "lying_peer: cannot map our ring: %s", strerror(errno));
  l->in_offered = true;
}

/* Our switch mark and a HANDSHAKE that offers a ring the server cannot
 * open by name (no segment has the name: ENOENT) but may fetch by
 * descriptor (R2S_CAP_SHM_FD): the server answers with FETCH. */
static void offer_by_fd(liar_t *l, uint64_t ring_size)
{
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  h.version = h.min_version = R2S_PROTO_VERSION;
  h.caps = l->caps = R2S_CAP_SHM_FD;
  host_identity(h.boot_id, &h.netns);
  in_ring_name(l);
  shm_offer(&h, l->in_name, ring_size);
  uint8_t buf[256];
  int n = r2s__handshake_encode(&h, buf, sizeof buf);
  send_urgent(l, R2S_SWITCH_BYTE);
  send_all(l, buf, (size_t)n, 0);
}

/* Whether process pid holds the file behind fd, in its descriptor table or
 * mapped; -1 if its /proc cannot be read. */
static int pid_holds(int pid, int fd)
{
  struct stat want, sb;
  char dir[64], path[384], line[4096];
  if (fstat(fd, &want) < 0) return -1;
  snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int held = 0;
  for (struct dirent *e; !held && (e = readdir(d));) {
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.' && stat(path, &sb) == 0 && sb.st_dev == want.st_dev && sb.st_ino == want.st_ino)
      held = 1;
  }
  closedir(d);
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  while (!held && fgets(line, sizeof line, f)) {
    unsigned maj, mnr;
    unsigned long ino;
    if (sscanf(line, "%*s %*s %*s %x:%x %lu", &maj, &mnr, &ino) == 3 && makedev(maj, mnr) == want.st_dev &&
        ino == want.st_ino)
      held = 1;
  }
  fclose(f);
  return held;
}

/* ---- the cases ---- */

typedef struct lie_s {
  const char *name;
  enum expect expect;
  const char *what;
} lie_t;

static const lie_t lies[] = {
    {"honest-ring", EXPECT_VERIFIED, "no lie: both directions through shared-memory rings"},
    {"honest-frames", EXPECT_VERIFIED,
     "no lie: no ring offered; the server declines, then PLAIN; we send frames"},
    {"ignored-frames", EXPECT_VERIFIED, "bogus CREDIT/FIN/DECLINE values and a doorbell storm mid-stream"},
    {"plain-honest", EXPECT_VERIFIED,
     "no lie: the ring, then PLAIN at its end, then raw TCP (urgent-data fallback)"},
    {"tail-past", EXPECT_CLOSED, "our tail in the server's ring jumps past head + size"},
    {"tail-back", EXPECT_CLOSED, "our tail in the server's ring moves backwards"},
    {"head-past", EXPECT_CLOSED, "credits: the head of our ring jumps past the server's tail"},
    {"head-back", EXPECT_CLOSED, "credits: the head of our ring moves backwards"},
    {"ring-offset", EXPECT_CLOSED, "RING frame with an offset past the ring"},
    {"data-after-ring", EXPECT_CLOSED, "a DATA frame after RING"},
    {"plain-past", EXPECT_CLOSED, "PLAIN frame with an offset past anything written, then EOF"},
    {"failover-past", EXPECT_CLOSED, "FAILOVER resending from past anything the server took, then plain TCP"},
    {"failover-none", EXPECT_CLOSED, "FAILOVER saying our direction was never in the server's ring, which it is"},
    {"plain-past-late", EXPECT_CLOSED,
     "the same after our whole stream went as DATA frames: only the server's writer is left to read it"},
    {"trunc-hdr-eof", EXPECT_CLOSED, "switch mark, 5 bytes of a frame header, EOF"},
    {"trunc-payload-eof", EXPECT_CLOSED, "switch mark, a HANDSHAKE cut short, EOF"},
    {"oversize-data", EXPECT_CLOSED, "a DATA frame of 256 KiB + 1"},
    {"oversize-ctrl", EXPECT_CLOSED, "a control frame of 64 KiB + 1"},
    {"huge-len", EXPECT_CLOSED, "a DATA frame of 4 GiB - 1"},
    {"unknown-type", EXPECT_CLOSED, "frame type 0x7f"},
    {"type-zero", EXPECT_CLOSED, "frame type 0"},
    {"reserved-bits", EXPECT_CLOSED, "reserved header bytes not 0"},
    {"version-future", EXPECT_CLOSED, "HANDSHAKE of protocol version 2 only"},
    {"version-inverted", EXPECT_CLOSED, "HANDSHAKE with min version above version"},
    {"mark-garbage", EXPECT_CLOSED, "switch mark followed by plain text, no handshake"},
    {"mark-eof", EXPECT_CLOSED, "switch mark, then EOF"},
    {"hs-flood", EXPECT_CLOSED, "1000 HANDSHAKE frames"},
    {"hs-bad-offer", EXPECT_CLOSED, "an offer whose length runs past the frame"},
    {"name-slash", EXPECT_CLOSED, "a segment name with a '/' inside"},
    {"name-unterminated", EXPECT_CLOSED, "a segment name without its NUL"},
    {"name-missing", EXPECT_VERIFIED, "a segment name that does not exist: fall back to frames"},
    {"name-prefix", EXPECT_VERIFIED, "a well-made segment not named /r2s-*: fall back"},
    {"name-mode", EXPECT_VERIFIED, "a segment of mode 0644: fall back"},
    {"name-size", EXPECT_VERIFIED, "a segment smaller than the ring offered: fall back"},
    {"name-ringsize", EXPECT_VERIFIED, "a ring size that is not a power of two: fall back"},
    {"name-symlink", EXPECT_VERIFIED, "a segment name that is a symlink to a good segment: fall back"},
    {"name-other-user", EXPECT_VERIFIED, "a segment owned by another user: fall back"},
    {"name-own-ring", EXPECT_VERIFIED, "the server's own ring offered back to it: fall back"},
    {"stall-credits", EXPECT_CLOSED, "never take bytes from our ring: the server's writer must sleep"},
    {"die-mid-ring", EXPECT_CLOSED, "exit in the middle of a ring transfer"},
    /* Rings by descriptor. As the taker: we offer our ring by name and
     * pretend we cannot open the server's, so we FETCH it. */
    {"fetch-honest", EXPECT_VERIFIED,
     "no lie: the server's ring by descriptor (sealed, its size; the name gone), our stream through it"},
    {"fetch-path", EXPECT_CLOSED, "FETCH naming a filesystem socket (listening), not an abstract one"},
    {"fetch-bad-len", EXPECT_CLOSED, "FETCH whose address length is one past the bytes it carries"},
    {"fetch-twice", EXPECT_CLOSED, "a second FETCH after the server handed its ring over"},
    {"fetch-after-ring", EXPECT_CLOSED, "FETCH after our RING (the server's ring opened by name)"},
    {"fetch-nobody", EXPECT_VERIFIED,
     "FETCH naming an abstract socket nobody listens on: HANDED with an errno, then frames"},
    /* As the owner: we offer a ring by a name that does not exist, with
     * R2S_CAP_SHM_FD, so the server FETCHes it from us. */
    {"handed-unsolicited", EXPECT_CLOSED, "HANDED though the server never asked (our ring was open by name)"},
    {"handed-honest", EXPECT_VERIFIED,
     "no lie: our ring as a sealed memfd; all of the server's stream comes through it"},
    {"handed-impostor", EXPECT_VERIFIED,
     "another ring with a wrong nonce on the server's socket first: it takes ours, not the impostor's"},
    {"handed-wrong-nonce", EXPECT_VERIFIED,
     "our ring sent with a nonce other than HANDED's: declined, frames"},
    {"handed-unsealed", EXPECT_VERIFIED,
     "a memfd with no seals (we could shrink it under the server): declined"},
    {"handed-shm-file", EXPECT_VERIFIED, "a shm_open'd segment, not a sealed memfd: declined"},
    {"handed-wrong-size", EXPECT_VERIFIED, "a sealed memfd half the size of the ring offered: declined"},
    {"handed-nothing", EXPECT_VERIFIED, "HANDED 0, but nothing sent to the server's socket: declined"},
    {"handed-no-fd", EXPECT_VERIFIED, "the nonce sent without a descriptor: declined"},
    {"handed-two-fds", EXPECT_VERIFIED,
     "the nonce with two good rings: declined, and the server keeps neither"},
    {"handed-status", EXPECT_VERIFIED,
     "a good ring and its nonce sent, but HANDED says it failed (EPERM): declined"},
    {"handed-plain", EXPECT_VERIFIED,
     "PLAIN instead of HANDED (our direction back to plain TCP): the server gives up on our ring"},
    {"handed-own-ring", EXPECT_VERIFIED,
     "the server's own ring, fetched from it, handed back to it as ours: declined"},
    {"handed-bad-len", EXPECT_CLOSED, "a HANDED of 23 bytes, not 24"},
    {"handed-twice", EXPECT_CLOSED, "a second HANDED after the server took our ring"},
    /* Over RDMA (R2SOCK_TRANSPORT=rdma on the server; an RDMA device for the
     * address, so run in the rxe guest: tests/rxe/guest-liar.sh). */
    {"rdma-honest", EXPECT_VERIFIED, "no lie: both directions through RDMA rings"},
    {"rdma-tail-past", EXPECT_CLOSED, "RDMA-write our tail in the server's ring past head + size"},
    {"rdma-tail-back", EXPECT_CLOSED, "RDMA-write our tail in the server's ring backwards"},
    {"rdma-tail-garbage", EXPECT_CLOSED, "RDMA-write a random 64-bit tail"},
    {"rdma-head-past", EXPECT_CLOSED, "RDMA-write a credit (head) past what the server sent"},
    {"rdma-head-back", EXPECT_CLOSED, "RDMA-write a credit (head) that moves backwards"},
    {"rdma-write-past-ring", EXPECT_CLOSED, "RDMA-write just past the server's ring: remote access error"},
    {"rdma-write-past-credit", EXPECT_CLOSED, "RDMA-write just past the server's credit line: access error"},
    {"rdma-read", EXPECT_CLOSED, "RDMA READ of the server's ring: refused"},
    {"rdma-send", EXPECT_CLOSED, "a SEND with a payload into receives that have no buffer"},
    {"rdma-imm-garbage", EXPECT_VERIFIED, "200 writes with random immediates mid-stream"},
    {"rdma-imm-tail", EXPECT_CLOSED,
     "as a peer with data immediates: an immediate whose tail is 1 GiB+ ahead"},
    {"rdma-bad-rkey", EXPECT_CLOSED, "our offer names a wrong rkey for our ring"},
    {"rdma-ring-size", EXPECT_CLOSED, "our offer claims a ring twice the size we registered"},
    {"rdma-bad-qpn", EXPECT_VERIFIED, "our offer has a queue pair number past 24 bits: declined, frames"},
    {"rdma-huge-ring", EXPECT_VERIFIED,
     "our offer claims a 1 GiB ring (the server's copy would pin 1 GiB): declined, frames"},
    {"rdma-fit-odd", EXPECT_VERIFIED, "our FIT offer is not a power of two: declined, frames"},
    {"rdma-fit-small", EXPECT_VERIFIED,
     "no lie, a FIT offer of 4 KiB: the server uses 4 KiB of its ring for our bytes, every one verified"},
    {"rdma-stall-credits", EXPECT_CLOSED, "never return credits: the server's writer must wait, not overrun"},
    {"rdma-other-conn", EXPECT_CLOSED,
     "RDMA-write into the server's ring of our second connection through our first one's queue pair: "
     "access error, the second connection verified"},
};

static const lie_t *find_lie(const char *name)
{
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++)
    if (strcmp(lies[i].name, name) == 0) return &lies[i];
  return NULL;
}

static void doorbell(liar_t *l)
{
  send_hdr(l, R2S_FRAME_DOORBELL, 0);
}

/* The PLAIN lie: back to plain TCP after ring bytes never written, some
 * plain bytes, then EOF. */
static void plain_past(liar_t *l)
{
  send_u64(l, R2S_FRAME_PLAIN, 1ull << 40);
  send_all(l, "and now plain TCP", 17, 0);
  shutdown(l->fd, SHUT_WR);
}

/* A bent offer: name, segment made (or not) as the case says, then a
 * HANDSHAKE that offers it. */
static void bent_offer(liar_t *l, const char *kase)
{
  bool make = true;
  mode_t mode = 0600;
  size_t data = IN_RING_SIZE;
  uint64_t ring_size = IN_RING_SIZE;
  in_ring_name(l);
  if (strcmp(kase, "name-missing") == 0) {
    make = false;
  } else if (strcmp(kase, "name-prefix") == 0) {
    snprintf(l->in_name, sizeof l->in_name, "/liar-%d-ring", (int)getpid());
  } else if (strcmp(kase, "name-mode") == 0) {
    mode = 0644;
  } else if (strcmp(kase, "name-size") == 0) {
    data = 4096;
  } else if (strcmp(kase, "name-ringsize") == 0) {
    ring_size = 3u << 12;
    data = 3u << 12;
  } else if (strcmp(kase, "name-own-ring") == 0) {
    /* needs the server's ring name: a server that reads (block mode)
     * answers our hello alone */
    if (!await_hs(l)) sc_die(SC_EXIT_FAIL, "lying_peer: no handshake from the server");
    make = false;
    memcpy(l->in_name, l->peer_shm.name, sizeof l->in_name);
    ring_size = l->peer_shm.ring_size;
  }
  char target[R2S_SHM_NAME_MAX];
  if (strcmp(kase, "name-symlink") == 0) {
    snprintf(target, sizeof target, "%s-target", l->in_name);
    if (make_segment(target, 0600, data, &l->in_mem, &l->in_len) < 0) sc_die(SC_EXIT_FAIL, "lying_peer: shm_open");
    char from[128], to[128];
    snprintf(from, sizeof from, "/dev/shm%s", l->in_name);
    snprintf(to, sizeof to, "/dev/shm%s", target);
    if (symlink(to, from) < 0) sc_die(SC_EXIT_FAIL, "lying_peer: symlink %s: %s", from, strerror(errno));
    make = false;
  }
  if (make && make_segment(l->in_name, mode, data, &l->in_mem, &l->in_len) < 0)
    sc_die(SC_EXIT_FAIL, "lying_peer: cannot make segment %s: %s", l->in_name, strerror(errno));
  if (strcmp(kase, "name-other-user") == 0) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", l->in_name);
    if (chown(path, 65534, 65534) < 0) sc_die(SC_EXIT_SKIP, "lying_peer: chown to nobody: %s", strerror(errno));
  }
  r2s_handshake_t h;
  memset(&h, 0, sizeof h);
  h.version = h.min_version = R2S_PROTO_VERSION;
  host_identity(h.boot_id, &h.netns);
  shm_offer(&h, l->in_name, ring_size);
  uint8_t buf[256];
  int n = r2s__handshake_encode(&h, buf, sizeof buf);
  send_urgent(l, R2S_SWITCH_BYTE);
  send_all(l, buf, (size_t)n, 0);
  l->tx_on = true;
  l->bad++;
  if (strcmp(kase, "name-symlink") == 0) {
    char from[128];
    snprintf(from, sizeof from, "/dev/shm%s", l->in_name);
    (void)run_until(l, ring_or_decline, 10);
    unlink(from);
    shm_unlink(target);
  }
}

/* A HANDSHAKE with the fields as given, raw. */
static void raw_handshake(liar_t *l, uint16_t version, uint16_t min_version)
{
  uint8_t buf[256];
  int n = make_handshake(l, false, buf, sizeof buf);
  buf[8] = (uint8_t)version, buf[9] = (uint8_t)(version >> 8);
  buf[10] = (uint8_t)min_version, buf[11] = (uint8_t)(min_version >> 8);
  send_all(l, buf, (size_t)n, 0);
}

/* Bent segment names inside an otherwise good HANDSHAKE. */
static void bad_name_handshake(liar_t *l, bool unterminated)
{
  uint8_t buf[256];
  in_ring_name(l);
  int n = make_handshake(l, true, buf, sizeof buf);
  uint8_t *name = buf + R2S_FRAME_HDR_LEN + 32 + 3;
  if (unterminated)
    memset(name, 'a', R2S_SHM_NAME_MAX);
  else
    memcpy(name, "/r2s-a/../../etc/passwd", sizeof "/r2s-a/../../etc/passwd");
  send_all(l, buf, (size_t)n, 0);
}

static long cpu_ticks(int pid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  long ut = 0, st = 0;
  /* fields after the command: state ... utime is the 14th field overall */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) != 2) return -1;
  return ut + st;
}

struct run_opts {
  const char *go_file;
  int watch_pid;
  double cpu_max; /* share of one core the stalled server may use */
};

static bool wait_for_file(const char *path, double secs)
{
  double end = now_s() + secs;
  while (access(path, F_OK) != 0) {
    if (now_s() > end) return false;
    usleep(20000);
  }
  return true;
}

/* stall-credits: never take bytes from our ring. The server's writer must
 * fill it exactly and then wait, without spinning. Ends the connection. */
static void stall_credits(liar_t *l, const struct run_opts *ro, bool *ok)
{
  l->stall_rx = true;
  if (!run_until(l, in_ring_full, 20)) {
    fprintf(stderr, "lying_peer: the server never filled our ring\n");
    *ok = false;
  }
  l->bad++;
  /* The server's writer now waits for credits that never come. Once
   * the other connections are done, it must use (almost) no CPU. */
  if (ro->go_file && !wait_for_file(ro->go_file, 60)) {
    fprintf(stderr, "lying_peer: %s never appeared\n", ro->go_file);
    *ok = false;
  }
  if (ro->watch_pid > 0) {
    long hz = sysconf(_SC_CLK_TCK), t0 = cpu_ticks(ro->watch_pid);
    double w0 = now_s();
    for (int i = 0; i < 100; i++) { /* 2 s, still reading (and dropping) TCP */
      (void)pump(l);
      usleep(20000);
    }
    long t1 = cpu_ticks(ro->watch_pid);
    double used = (double)(t1 - t0) / (double)hz, wall = now_s() - w0;
    printf("lying_peer: stalled server used %.2f s of CPU in %.2f s\n", used, wall);
    if (t0 < 0 || t1 < 0 || used > ro->cpu_max * wall) {
      fprintf(stderr, "lying_peer: the server spun while waiting for credits (%.2f s CPU in %.2f s)\n", used,
              wall);
      *ok = false;
    }
  }
  if (__atomic_load_n(&l->in.ctl->tail, __ATOMIC_ACQUIRE) - l->in.head != IN_RING_SIZE) {
    fprintf(stderr, "lying_peer: the server wrote past the credits it had\n");
    *ok = false;
  }
  shutdown(l->fd, SHUT_RDWR);
}

#define IS(x) (strcmp(kase, (x)) == 0)

/* Bent RDMA offers. */
static void bend_rkey(r2s_offer_rdma_t *o)
{
  o->ring_rkey ^= 0x5a5a00u;
}
static void bend_size(r2s_offer_rdma_t *o)
{
  o->ring_size *= 2;
}
static void bend_qpn(r2s_offer_rdma_t *o)
{
  o->qpn |= 1u << 24;
}
static void bend_huge(r2s_offer_rdma_t *o)
{
  o->ring_size = 1ull << 30; /* valid, but more than the server takes on */
}
static void bend_fit_odd(r2s_offer_rdma_t *o)
{
  o->copy_max = 12345; /* not a power of two */
}
#define FIT_SMALL 4096u
static void bend_fit_small(r2s_offer_rdma_t *o)
{
  o->copy_max = FIT_SMALL;
}

static bool have_ready(liar_t *l)
{
  return l->got_ready;
}
static bool tcp_ended(liar_t *l)
{
  return l->tcp_end;
}

/* The RDMA version of honest_rings: our queue pair to RTS from the
 * server's HANDSHAKE, READY, and once the server's READY is in, RING and
 * our bytes into its ring. Our stream waits until then: the server starts
 * its own once it has our stream's header, which so comes after our READY,
 * and its bytes go into our ring, not into DATA frames, whatever the
 * timing (the lies in our offer need the server to use it). */
static bool honest_rdma(liar_t *l)
{
  if (!hello(l)) return false;
  switch_mark(l, true);
  l->tx_on = false;
  if (!await_hs(l) || lr_connect(l->rd, &l->peer_rdma) < 0) return false;
  send_hdr(l, R2S_FRAME_READY, 0);
  if (!run_until(l, have_ready, 10) || map_out_ring(l) < 0) return false;
  send_u64(l, R2S_FRAME_RING, 0);
  l->tx_on = true;
  return true;
}

/* A write or read outside what the server registered must complete in
 * error on our side (remote access error; for a read, also an invalid
 * request: the queue pair allows no remote reads at all). */
static void expect_refused(liar_t *l, const char *what, int st, bool read_ok, bool *ok)
{
  bool refused = lr_refused(st, read_ok);
  printf("lying_peer: %s completed with: %s\n", what, lr_status_str(st));
  if (!refused) {
    fprintf(stderr, "lying_peer: %s was not refused (%s)\n", what, lr_status_str(st));
    *ok = false;
  }
}

/* The second connection of rdma-other-conn (main opens it): an honest one
 * of ours to the same server, whose ring the first one's queue pair then
 * tries to write. */
static liar_t *second;

/* rdma-other-conn: a peer learns the address and rkey of each ring the
 * server offers it, and an rkey is a few random bits over a guessable
 * index; if the server's connections shared a protection domain, any
 * of its peers could write into another's ring with a guess. The write
 * through the first connection must complete in error, and the second
 * connection must still carry its stream to the end, verified. */
static void other_conn(liar_t *l, bool *ok)
{
  liar_t *l2 = second;
  if (!honest_rdma(l2) || !run_until(l2, header_sent, 10)) {
    fprintf(stderr, "lying_peer: the second connection did not reach RDMA (ready=%d)\n", l2->got_ready);
    *ok = false;
    return;
  }
  if (!honest_rdma(l) || !run_until(l, header_sent, 10)) {
    fprintf(stderr, "lying_peer: the first connection did not reach RDMA (ready=%d)\n", l->got_ready);
    *ok = false;
    return;
  }
  const lr_peer_t *other = lr_peer(l2->rd);
  /* the second ring's tail word, rewritten with its own value: a write
   * that got through would change nothing the server could notice */
  uint64_t v = l2->out.tail;
  int st = lr_write(l->rd, &v, 8, other->ring + offsetof(r2s_ring_ctl_t, tail), other->ring_rkey, -1);
  expect_refused(l, "a write into another connection's ring", st, false, ok);
  l->bad++;
  doorbell(l);
  if (!run_until(l2, stream_done, 60)) {
    fprintf(stderr, "lying_peer: the second connection's stream did not complete: %s\n", sc_session_error(l2->s));
    *ok = false;
  }
}

static enum expect rdma_case(liar_t *l, const char *kase, const struct run_opts *ro, bool *ok)
{
  if (IS("rdma-other-conn")) {
    other_conn(l, ok);
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (IS("rdma-bad-qpn") || IS("rdma-huge-ring") || IS("rdma-fit-odd")) {
    /* the server will not connect: DECLINE, frames both ways */
    l->bend = IS("rdma-bad-qpn") ? bend_qpn : IS("rdma-huge-ring") ? bend_huge : bend_fit_odd;
    if (!hello(l)) return EXPECT_CLOSED;
    switch_mark(l, true);
    l->bad++;
    if (!await_hs(l)) *ok = false;
    send_u64(l, R2S_FRAME_DECLINE, 2);
    if (!run_until(l, ring_or_decline, 10) || l->got_ring || l->got_ready) {
      fprintf(stderr, "lying_peer: expected the server to decline our offer (ring=%d ready=%d decline=%d)\n",
              l->got_ring, l->got_ready, l->got_decline);
      *ok = false;
    }
    if (!run_until(l, stream_done, 60)) *ok = false;
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  if (IS("rdma-bad-rkey")) l->bend = bend_rkey;
  /* The server then takes tails from our immediates (its stream to us
   * comes with them too, which we do not read: the lie comes first). */
  if (IS("rdma-imm-tail")) l->caps = R2S_CAP_RDMA_IMM;
  if (IS("rdma-ring-size")) l->bend = bend_size;
  if (IS("rdma-fit-small")) {
    /* honest, with a FIT offer of 4 KiB: the server uses only the first
     * 4 KiB of its ring for our bytes, wrapping there */
    l->bend = bend_fit_small;
    lr_fit(l->rd, FIT_SMALL);
  }
  /* The server must still be reading when a lie on its ring comes. */
  if (strncmp(kase, "rdma-tail-", 10) == 0) l->tx_cap = 128 << 10;
  if (!honest_rdma(l)) {
    fprintf(stderr, "lying_peer: the RDMA setup with the server failed (ready=%d decline=%d)\n", l->got_ready,
            l->got_decline);
    *ok = false;
    return EXPECT_VERIFIED;
  }
  /* tail-back needs a credit from the server (it consumed something, or
   * an older tail is no step back), which comes every quarter of its ring
   * (512 KiB by default). */
  if (IS("rdma-tail-back")) l->tx_cap = 192u << 10;
  const lr_peer_t *pr = lr_peer(l->rd);
  uint64_t v = 0;
  int st = 0;
  if (IS("rdma-honest") || IS("rdma-imm-garbage") || IS("rdma-fit-small")) {
    if (IS("rdma-imm-garbage")) {
      (void)run_until(l, header_sent, 10);
      /* Our tail as it is, each time with a random immediate: the write is
       * honest, the immediates are not. */
      for (int i = 0; i < 200 && st == 0; i++, l->bad++) {
        uint32_t imm = 0;
        (void)getrandom(&imm, sizeof imm, 0);
        v = l->out.tail;
        st = lr_write(l->rd, &v, 8, pr->ring + offsetof(r2s_ring_ctl_t, tail), pr->ring_rkey, imm);
      }
      if (st != 0) {
        fprintf(stderr, "lying_peer: a write with immediate failed: %s\n", lr_status_str(st));
        *ok = false;
      }
    }
    if (!run_until(l, stream_done, 60)) *ok = false;
    /* A write that failed before the end shows as a stream that does not
     * complete; one around the end may meet a server already gone. */
    if (l->rd_status)
      fprintf(stderr, "lying_peer: an RDMA write of the stream failed: %s\n", lr_status_str(l->rd_status));
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  if (IS("rdma-stall-credits")) {
    stall_credits(l, ro, ok);
    return EXPECT_CLOSED;
  }
  if (IS("rdma-bad-rkey") || IS("rdma-ring-size")) { /* the server's own writes meet the lie */
    l->bad++;
    (void)run_until(l, tcp_ended, 30);
    return await_close(l, 10) && !stream_done(l) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (IS("rdma-head-past") || IS("rdma-head-back")) {
    (void)run_until(l, IS("rdma-head-past") ? server_produced : consumed_a_ring, 20);
    l->stall_rx = true;
    v = IS("rdma-head-past") ? __atomic_load_n(&l->in.ctl->tail, __ATOMIC_ACQUIRE) + IN_RING_SIZE + 4096 : 0;
    st = lr_write(l->rd, &v, 8, pr->credit, pr->credit_rkey, -1);
  } else if (strncmp(kase, "rdma-tail-", 10) == 0) {
    (void)run_until(l, IS("rdma-tail-back") ? server_consumed : header_sent, 10);
    if (IS("rdma-tail-past")) v = l->out.tail + l->out.size + 4096;
    if (IS("rdma-tail-back")) v = __atomic_load_n(&l->out.ctl->head, __ATOMIC_ACQUIRE) - 8;
    if (IS("rdma-tail-garbage")) (void)getrandom(&v, sizeof v, 0);
    st = lr_write(l->rd, &v, 8, pr->ring + offsetof(r2s_ring_ctl_t, tail), pr->ring_rkey, -1);
  } else if (IS("rdma-imm-tail")) {
    (void)run_until(l, header_sent, 10);
    /* Our tail word as it is, but the immediate, read as a tail, is at
     * least 2^30 past anything the server consumed: beyond any ring. */
    uint32_t imm = 0;
    (void)getrandom(&imm, sizeof imm, 0);
    v = l->out.tail;
    st = lr_write(l->rd, &v, 8, pr->ring + offsetof(r2s_ring_ctl_t, tail), pr->ring_rkey,
                  (imm & 0x3fffffffu) | 0x40000000u);
  } else {
    (void)run_until(l, header_sent, 10);
    if (IS("rdma-write-past-ring")) {
      st = lr_write(l->rd, &v, 8, pr->ring + R2S_RING_CTL_SIZE + pr->ring_size, pr->ring_rkey, -1);
      expect_refused(l, "a write past the ring", st, false, ok);
    } else if (IS("rdma-write-past-credit")) {
      st = lr_write(l->rd, &v, 8, pr->credit + 64, pr->credit_rkey, -1);
      expect_refused(l, "a write past the credit line", st, false, ok);
    } else if (IS("rdma-read")) {
      uint8_t buf[64];
      memset(buf, 0xa5, sizeof buf);
      st = lr_read(l->rd, buf, sizeof buf, pr->ring + R2S_RING_CTL_SIZE, pr->ring_rkey);
      expect_refused(l, "a read of the ring", st, true, ok);
      for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != 0xa5) {
          fprintf(stderr, "lying_peer: a refused read still brought bytes of the server's ring\n");
          *ok = false;
          break;
        }
    } else if (IS("rdma-send")) {
      static const char junk[48] = "a SEND where only immediates are expected";
      st = lr_send(l->rd, junk, sizeof junk);
      printf("lying_peer: the SEND completed with: %s\n", lr_status_str(st));
    } else {
      fprintf(stderr, "lying_peer: case %s not handled\n", kase);
      exit(2);
    }
    st = 0;
  }
  if (st != 0) {
    fprintf(stderr, "lying_peer: the lie itself did not reach the server: %s\n", lr_status_str(st));
    *ok = false;
  }
  l->bad++;
  doorbell(l);
  return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
}

/* The liar as the taker of the server's ring by descriptor (fetch-*): it
 * offers its own ring by name, honestly, and pretends it cannot open the
 * server's. Our stream waits until the lie is out (honest: until our
 * RING): the server, waiting for its header, reads each frame as it
 * comes, and is still reading when the lie arrives. */
static enum expect fetch_case(liar_t *l, const char *kase, bool *ok)
{
  r2s_fetch_t ask;
  int lfd = -1;
  bool closed;
  if (IS("fetch-after-ring")) {
    l->tx_cap = 256 << 10; /* the server must still be reading when the lie comes */
    if (!honest_rings(l)) {
      *ok = false;
      return EXPECT_VERIFIED;
    }
    (void)run_until(l, header_sent, 10);
    lfd = fd_listen(&ask);
    send_fetch(l, &ask);
    l->bad++;
    closed = await_close(l, 10);
    expect_no_connection(lfd, ok);
    close(lfd);
    return closed ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (!hello(l)) return EXPECT_CLOSED;
  switch_mark(l, true);
  l->tx_on = false;
  if (!await_hs(l)) {
    fprintf(stderr, "lying_peer: no shared-memory HANDSHAKE from the server\n");
    *ok = false;
    return EXPECT_VERIFIED;
  }
  if (!(l->peer_hs.caps & R2S_CAP_SHM_FD)) {
    fprintf(stderr, "lying_peer: the server's HANDSHAKE lacks R2S_CAP_SHM_FD\n");
    *ok = false;
  }
  if (IS("fetch-path") || IS("fetch-bad-len")) {
    if (IS("fetch-path")) {
      /* A real socket there: a server that connected would show. */
      struct sockaddr_un sa = {.sun_family = AF_UNIX};
      const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
      int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s/lying-peer-%d.sock", dir, (int)getpid());
      lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (n <= 0 || (size_t)n >= sizeof sa.sun_path || lfd < 0 ||
          bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 16) < 0)
        sc_die(SC_EXIT_FAIL, "lying_peer: a listener at %s: %s", sa.sun_path, strerror(errno));
      memset(&ask, 0, sizeof ask);
      ask.addr_len = (uint8_t)(n + 1);
      memcpy(ask.addr, sa.sun_path, ask.addr_len);
      send_fetch(l, &ask);
      l->bad++;
      closed = await_close(l, 10);
      unlink(sa.sun_path);
    } else {
      /* One byte more than the frame carries: a receiver that believed it
       * would read past the payload. */
      uint8_t pl[1 + R2S_FETCH_ADDR_MAX];
      lfd = fd_listen(&ask);
      pl[0] = (uint8_t)(ask.addr_len + 1);
      memcpy(pl + 1, ask.addr, ask.addr_len);
      l->asked = true;
      send_hdr(l, R2S_FRAME_FETCH, 1u + ask.addr_len);
      send_all(l, pl, 1u + ask.addr_len, 0);
      l->bad++;
      closed = await_close(l, 10);
    }
    expect_no_connection(lfd, ok);
    close(lfd);
    return closed ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (IS("fetch-nobody")) {
    uint32_t r = 0;
    (void)getrandom(&r, sizeof r, 0);
    memset(&ask, 0, sizeof ask);
    ask.addr_len = (uint8_t)(1 + snprintf((char *)ask.addr + 1, sizeof ask.addr - 1,
                                          "lying-peer-nobody-%d-%08x", (int)getpid(), r));
    send_fetch(l, &ask);
    l->bad++;
    static const uint8_t zero[R2S_NONCE_LEN];
    if (!run_until(l, have_handed, 10) || l->handed.status == 0 ||
        memcmp(l->handed.nonce, zero, sizeof zero) != 0) {
      fprintf(stderr,
              "lying_peer: expected a HANDED with an errno and no nonce (handed=%d status=%" PRIu64 ")\n",
              l->got_handed, l->handed.status);
      *ok = false;
    }
    printf("lying_peer: HANDED status %" PRIu64 " (%s)\n", l->handed.status,
           l->handed.status < 4096 ? strerror((int)l->handed.status) : "?");
    /* As a shim taker does after a failed fetch that began with ENOENT:
     * DECLINE, our direction stays on frames. */
    send_u64(l, R2S_FRAME_DECLINE, 2);
    l->tx_on = true;
    if (!run_until(l, stream_done, 60)) *ok = false;
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  int fd = fetch_server_ring(l); /* fetch-honest, fetch-twice */
  if (fd < 0) {
    *ok = false;
    return EXPECT_VERIFIED;
  }
  close(fd);
  if (IS("fetch-twice")) {
    /* Before our RING: only the once-only rule refuses it. */
    lfd = fd_listen(&ask);
    send_fetch(l, &ask);
    l->bad++;
    closed = await_close(l, 10);
    close(lfd);
    return closed ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  send_u64(l, R2S_FRAME_RING, 0);
  l->tx_on = true;
  if (!run_until(l, stream_done, 60)) *ok = false;
  /* The stream waited for RING: every byte of it went through the ring. */
  if (l->out.tail < l->s->tx_data_bytes) {
    fprintf(stderr, "lying_peer: only %" PRIu64 " of our %" PRIu64 " bytes went through the server's ring\n",
            l->out.tail, l->s->tx_data_bytes);
    *ok = false;
  }
  return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
}

/* A descriptor the server refused must not stay with it (nor one it never
 * had to take, the impostor's); one it took must be mapped there, which
 * also shows that pid_holds sees such a thing. */
static void expect_held(const struct run_opts *ro, int fd, bool want, const char *what, bool *ok)
{
  if (fd < 0 || ro->watch_pid <= 0) return;
  int held = pid_holds(ro->watch_pid, fd);
  if (held < 0) {
    fprintf(stderr, "lying_peer: cannot read the server's /proc for %s\n", what);
    *ok = false;
  } else if (held != want) {
    fprintf(stderr, "lying_peer: the server %s %s\n", held ? "still holds" : "does not hold", what);
    *ok = false;
  }
}

/* Once the server has answered our ring with RING or DECLINE, the socket
 * it asked for it on must be gone: nothing can come on it any more, and a
 * message left in its queue would keep our descriptor in flight there. */
static void expect_listener_closed(const liar_t *l, bool *ok)
{
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, l->fetch.addr, l->fetch.addr_len);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) sc_die(SC_EXIT_FAIL, "lying_peer: socket: %s", strerror(errno));
  if (connect(s, (struct sockaddr *)&sa,
              (socklen_t)(offsetof(struct sockaddr_un, sun_path) + l->fetch.addr_len)) == 0) {
    fprintf(stderr, "lying_peer: the server's FETCH socket still listens after it answered\n");
    *ok = false;
  }
  close(s);
}

/* The liar as the owner of a ring the server fetches (handed-*): its
 * HANDSHAKE offers a ring by a name that does not exist, with
 * R2S_CAP_SHM_FD, so the server's attach fails (ENOENT) and it sends
 * FETCH; we answer as the case says. We decline the server's ring (our
 * stream goes as DATA frames), except in handed-own-ring, where we fetch
 * it. Our stream waits until the server has answered with RING or
 * DECLINE: the server sends its own only after our header, so all of it
 * takes the path the server chose. */
static enum expect handed_case(liar_t *l, const char *kase, const struct run_opts *ro, bool *ok)
{
  uint8_t nonce[R2S_NONCE_LEN], other[R2S_NONCE_LEN];
  (void)getrandom(nonce, sizeof nonce, 0);
  (void)getrandom(other, sizeof other, 0);
  if (!hello(l)) return EXPECT_CLOSED;
  if (IS("handed-unsolicited")) {
    switch_mark(l, true); /* a ring the server opens by name: it never asks */
    l->tx_on = false;
    send_handed(l, 0, nonce);
    l->bad++;
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  uint64_t ring_size = IN_RING_SIZE;
  int own = -1;
  if (IS("handed-own-ring")) {
    /* The server answers our hello alone (it reads): its ring's size is
     * the size we must claim for the ring we hand back. */
    if (!await_hs(l)) {
      *ok = false;
      return EXPECT_VERIFIED;
    }
    ring_size = l->peer_shm.ring_size;
  }
  offer_by_fd(l, ring_size);
  if (IS("handed-own-ring")) {
    if ((own = fetch_server_ring(l)) < 0) {
      *ok = false;
      return EXPECT_VERIFIED;
    }
    send_u64(l, R2S_FRAME_RING, 0);
  } else {
    send_u64(l, R2S_FRAME_DECLINE, 2);
  }
  if (!run_until(l, have_fetch, 10)) {
    fprintf(stderr, "lying_peer: the server did not ask for our ring by descriptor\n");
    *ok = false;
    return EXPECT_VERIFIED;
  }
  size_t bytes = r2s__ring_bytes(ring_size);
  int fds[2] = {-1, -1}, nfd = 1, imp = -1;
  uint64_t status = 0;
  bool send_msg = !IS("handed-nothing") && !IS("handed-plain");
  const uint8_t *msg_nonce = IS("handed-wrong-nonce") ? other : nonce;
  if (IS("handed-own-ring"))
    fds[0] = own;
  else if (IS("handed-unsealed"))
    fds[0] = ring_memfd(bytes, 0);
  else if (IS("handed-shm-file"))
    fds[0] = ring_shm_file(bytes);
  else if (IS("handed-wrong-size"))
    fds[0] = ring_memfd(R2S_RING_CTL_SIZE + ring_size / 2, RING_SEALS);
  else
    fds[0] = ring_memfd(bytes, RING_SEALS);
  /* Whatever we hand over is our ring, if it can be: a server that took a
   * ring it should have refused then shows by its RING. */
  if (!IS("handed-own-ring") && !IS("handed-wrong-size")) in_ring_at(l, fds[0]);
  if (IS("handed-no-fd")) nfd = 0;
  if (IS("handed-two-fds")) fds[1] = ring_memfd(bytes, RING_SEALS), nfd = 2;
  if (IS("handed-status")) status = EPERM;
  int rc = 0;
  if (IS("handed-impostor")) {
    /* What anyone who can connect to the server's socket first could try:
     * a ring of its own, without the nonce, which only we and the server
     * know. */
    imp = ring_memfd(bytes, RING_SEALS);
    rc = hand_fds(&l->fetch, other, sizeof other, &imp, 1);
  }
  if (!rc && send_msg) rc = hand_fds(&l->fetch, msg_nonce, R2S_NONCE_LEN, fds, nfd);
  if (rc < 0) {
    fprintf(stderr, "lying_peer: cannot reach the server's FETCH socket: %s\n", strerror(-rc));
    *ok = false;
  }
  if (IS("handed-plain")) {
    /* Our direction back to plain TCP while the server waits for HANDED:
     * none can come behind PLAIN, so it must give up on our ring. */
    send_u64(l, R2S_FRAME_PLAIN, 0);
    l->tx_plain = true;
  } else if (IS("handed-bad-len")) {
    uint8_t pl[8 + R2S_NONCE_LEN - 1] = {0}; /* status 0, the nonce short of a byte */
    memcpy(pl + 8, nonce, sizeof pl - 8);
    send_hdr(l, R2S_FRAME_HANDED, sizeof pl);
    send_all(l, pl, sizeof pl, 0);
  } else {
    send_handed(l, status, nonce);
  }
  bool want_ring = IS("handed-honest") || IS("handed-impostor") || IS("handed-twice");
  if (!want_ring) l->bad++;
  if (IS("handed-bad-len")) return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  if (!run_until(l, ring_or_decline, 10) || l->got_ring != want_ring) {
    fprintf(stderr, "lying_peer: expected the server to %s our ring (ring=%d decline=%d)\n",
            want_ring ? "take" : "decline", l->got_ring, l->got_decline);
    *ok = false;
  }
  if (IS("handed-twice")) {
    send_handed(l, 0, nonce);
    l->bad++;
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  expect_listener_closed(l, ok);
  if (!IS("handed-own-ring")) {
    expect_held(ro, fds[0], want_ring, "the ring we handed over", ok);
    expect_held(ro, fds[1], false, "the second ring of the message", ok);
    expect_held(ro, imp, false, "the impostor's ring", ok);
  }
  l->tx_on = true;
  if (!run_until(l, stream_done, 60)) *ok = false;
  /* The server's stream waited for our header, which waited for its
   * RING: every byte of it came through our ring. */
  if (want_ring && l->in_ring_bytes < l->s->rx_data_bytes) {
    fprintf(stderr, "lying_peer: only %" PRIu64 " of the server's %" PRIu64 " bytes came through our ring\n",
            l->in_ring_bytes, l->s->rx_data_bytes);
    *ok = false;
  }
  if (imp >= 0) {
    r2s_ring_ctl_t ctl;
    if (pread(imp, &ctl, sizeof ctl, 0) != (ssize_t)sizeof ctl || ctl.tail != 0) {
      fprintf(stderr, "lying_peer: the server wrote into the impostor's ring\n");
      *ok = false;
    }
    close(imp);
  }
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0) close(fds[i]);
  return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
}

/* Runs the case; returns the outcome reached. */
static enum expect run_case(liar_t *l, const char *kase, const struct run_opts *ro, bool *ok)
{
  *ok = true;
  if (l->rd) return rdma_case(l, kase, ro, ok);
  if (strncmp(kase, "fetch-", 6) == 0) return fetch_case(l, kase, ok);
  if (strncmp(kase, "handed-", 7) == 0) return handed_case(l, kase, ro, ok);
  if (IS("honest-ring") || IS("ignored-frames") || IS("stall-credits") || IS("die-mid-ring")) {
    /* die-mid-ring must die with the ring in use: like plain-honest, a
     * server slow to send its HANDSHAKE (a loaded host) could otherwise
     * have the whole stream as DATA frames first, and server_consumed
     * never comes true (seen once: the case ended with all 4 MiB verified
     * and the server content). */
    if (IS("die-mid-ring")) l->tx_cap = PRE_RING_CAP;
    if (!honest_rings(l)) {
      fprintf(stderr, "lying_peer: no ring from the server (decline=%d)\n", l->got_decline);
      *ok = false;
      return EXPECT_CLOSED;
    }
    l->tx_cap = 0;
    if (IS("ignored-frames")) {
      (void)run_until(l, header_sent, 10);
      send_u64(l, R2S_FRAME_CREDIT, ~0ull);
      send_u64(l, R2S_FRAME_FIN, 1ull << 62);
      send_u64(l, R2S_FRAME_DECLINE, 12345);
      for (int i = 0; i < 1000; i++) doorbell(l);
      l->bad += 1003;
    } else if (IS("stall-credits")) {
      stall_credits(l, ro, ok);
      return EXPECT_CLOSED; /* we ended it; the driver checks the server's side */
    } else if (IS("die-mid-ring")) {
      (void)run_until(l, server_produced, 10);
      (void)run_until(l, server_consumed, 10);
      l->bad++;
      printf("lying_peer: case die-mid-ring: outcome=died bad_inputs=1 verified=%" PRIu64 "\n",
             l->s->rx_data_bytes);
      fflush(stdout);
      _exit(0);
    }
    if (!run_until(l, stream_done, 60)) *ok = false;
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  if (IS("plain-honest")) {
    /* The case is about the ring's end, so the ring must carry some of the
     * stream. Our stream starts as DATA frames at our switch mark, and a
     * server slow to send its HANDSHAKE (seen under TSan) used to get all
     * 4 MiB of it that way before RING: then the ring carried nothing,
     * server_consumed never came true, and the case ended "closed" with
     * the whole stream verified on both sides. So only a few DATA frames go
     * before RING, the rest waits for the ring. */
    l->tx_cap = PRE_RING_CAP;
    if (!honest_rings(l)) {
      fprintf(stderr, "lying_peer: no ring from the server (decline=%d)\n", l->got_decline);
      *ok = false;
      return EXPECT_CLOSED;
    }
    l->tx_cap = 0;
    if (!run_until(l, server_consumed, 10)) {
      fprintf(stderr, "lying_peer: the server took no 4 KiB from its ring within 10 s\n");
      *ok = false;
      return EXPECT_CLOSED;
    }
    /* Our ring writes stop; once the server has drained them, PLAIN says
     * where they end. The pause lets the server's poll() read the PLAIN
     * frame before the raw bytes arrive behind it. */
    l->out_on = l->tx_on = false;
    double end = now_s() + 10;
    while (__atomic_load_n(&l->out.ctl->head, __ATOMIC_ACQUIRE) != l->out.tail && now_s() < end) usleep(1000);
    send_u64(l, R2S_FRAME_PLAIN, l->out.tail);
    usleep(200000);
    l->tx_plain = l->tx_on = true;
    if (!run_until(l, stream_done, 60)) *ok = false;
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  if (IS("plain-past-late")) {
    /* Our whole stream goes as DATA frames before RING: the server's reader,
     * done at its last byte, never reads what follows. RING and the lie
     * then reach a connection where only the writer is left (we never take
     * from our ring, so it waits for room). */
    l->stall_rx = true;
    if (!hello(l)) return EXPECT_VERIFIED;
    switch_mark(l, true);
    if (!await_hs(l) || !run_until(l, ring_or_decline, 10) || !l->got_ring || !run_until(l, tx_done, 30) ||
        map_out_ring(l) < 0) {
      fprintf(stderr, "lying_peer: no ring from the server, or our stream did not go out\n");
      *ok = false;
      return EXPECT_VERIFIED;
    }
    send_u64(l, R2S_FRAME_RING, 0);
    plain_past(l);
    l->bad++;
    doorbell(l);
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (IS("honest-frames") || strncmp(kase, "name-", 5) == 0) {
    if (!hello(l)) {
      *ok = false;
      return EXPECT_CLOSED;
    }
    if (IS("honest-frames")) {
      switch_mark(l, false);
    } else if (IS("name-slash") || IS("name-unterminated")) {
      send_urgent(l, R2S_SWITCH_BYTE);
      bad_name_handshake(l, IS("name-unterminated"));
      l->bad++;
      return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
    } else {
      bent_offer(l, kase);
    }
    send_u64(l, R2S_FRAME_DECLINE, 2);
    if (!run_until(l, ring_or_decline, 10) || l->got_ring) {
      fprintf(stderr, "lying_peer: expected the server to decline our ring (ring=%d decline=%d)\n", l->got_ring,
              l->got_decline);
      *ok = false;
    }
    if (!run_until(l, stream_done, 60)) *ok = false;
    /* We offered nothing it could reach: its direction must not stay on
     * DATA frames (docs/protocol.md, Transport). */
    if (IS("honest-frames") && !l->rx_plain) {
      fprintf(stderr, "lying_peer: expected the server's PLAIN frame behind its DECLINE\n");
      *ok = false;
    }
    return stream_done(l) ? EXPECT_VERIFIED : EXPECT_CLOSED;
  }
  /* The rest lie on the frames or in the rings, then wait for the end. */
  if (IS("tail-past") || IS("tail-back") || IS("head-past") || IS("head-back") || IS("data-after-ring") ||
      IS("plain-past") || IS("failover-past") || IS("failover-none")) {
    if (IS("tail-past") || IS("tail-back") || IS("data-after-ring")) l->tx_cap = 256 << 10;
    if (!honest_rings(l)) {
      *ok = false;
      return EXPECT_VERIFIED;
    }
    if (IS("tail-past")) {
      (void)run_until(l, header_sent, 10);
      __atomic_store_n(&l->out.ctl->tail, l->out.tail + l->out.size + 4096, __ATOMIC_RELEASE);
    } else if (IS("tail-back")) {
      /* Through the ring: the 256 KiB above may all have left as DATA
       * frames before it, and a tail still at 0 has no step back to take
       * (the server would never consume, and head - 8 is far past). */
      l->tx_cap = l->s->tx_data_bytes + (256 << 10);
      if (!run_until(l, server_consumed, 10)) {
        fprintf(stderr, "lying_peer: the server consumed nothing from our ring\n");
        *ok = false;
        return EXPECT_VERIFIED;
      }
      uint64_t head = __atomic_load_n(&l->out.ctl->head, __ATOMIC_ACQUIRE);
      __atomic_store_n(&l->out.ctl->tail, head - 8, __ATOMIC_RELEASE);
    } else if (IS("head-past") || IS("head-back")) {
      /* Past a ring's worth, the server must have seen a head above 0
       * (it wrote more than the ring holds): 0 is then a step back. */
      (void)run_until(l, IS("head-past") ? server_produced : consumed_a_ring, 10);
      l->stall_rx = true;
      uint64_t tail = __atomic_load_n(&l->in.ctl->tail, __ATOMIC_ACQUIRE);
      __atomic_store_n(&l->in.ctl->head, IS("head-past") ? tail + IN_RING_SIZE + 4096 : 0, __ATOMIC_RELEASE);
    } else if (IS("data-after-ring")) {
      (void)run_until(l, header_sent, 10);
      send_hdr(l, R2S_FRAME_DATA, 4);
      send_all(l, "lies", 4, 0);
    } else if (IS("plain-past")) {
      (void)run_until(l, header_sent, 10);
      plain_past(l);
    } else if (IS("failover-past") || IS("failover-none")) {
      (void)run_until(l, header_sent, 10);
      send_u64(l, R2S_FRAME_FAILOVER, IS("failover-past") ? 1ull << 40 : UINT64_MAX);
      send_all(l, "and now plain TCP", 17, 0);
      shutdown(l->fd, SHUT_WR);
    }
    l->bad++;
    doorbell(l);
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  if (!hello(l)) {
    *ok = false;
    return EXPECT_VERIFIED;
  }
  if (IS("ring-offset")) {
    /* The stream must still be unfinished when the lie comes: a server
     * that has verified the whole stream stops reading and never sees it. */
    l->tx_cap = 256 << 10;
    switch_mark(l, true);
    if (!run_until(l, ring_or_decline, 10) || !l->got_ring || map_out_ring(l) < 0) {
      *ok = false;
      return EXPECT_VERIFIED;
    }
    send_u64(l, R2S_FRAME_RING, 1ull << 40);
    l->bad++;
    return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
  }
  send_urgent(l, R2S_SWITCH_BYTE);
  uint8_t h[R2S_FRAME_HDR_LEN];
  if (IS("trunc-hdr-eof")) {
    r2s__frame_hdr_put(h, sizeof h, R2S_FRAME_HANDSHAKE, 80);
    send_all(l, h, 5, 0);
    shutdown(l->fd, SHUT_WR);
  } else if (IS("trunc-payload-eof")) {
    uint8_t buf[256];
    int n = make_handshake(l, false, buf, sizeof buf);
    send_all(l, buf, (size_t)n / 2, 0);
    shutdown(l->fd, SHUT_WR);
  } else if (IS("oversize-data") || IS("huge-len")) {
    switch_mark(l, false); /* a second mark: harmless, the kernel keeps the last */
    send_u64(l, R2S_FRAME_DECLINE, 2);
    send_hdr(l, R2S_FRAME_DATA, IS("huge-len") ? 0xffffffffu : R2S_FRAME_DATA_MAX + 1);
    send_all(l, l->tbuf, 4096, 0);
  } else if (IS("oversize-ctrl")) {
    send_hdr(l, R2S_FRAME_DOORBELL, R2S_FRAME_CTRL_MAX + 1);
    send_all(l, l->tbuf, 4096, 0);
  } else if (IS("unknown-type") || IS("type-zero") || IS("reserved-bits")) {
    r2s__frame_hdr_put(h, sizeof h, IS("unknown-type") ? 0x7f : IS("type-zero") ? 0 : R2S_FRAME_DOORBELL, 0);
    if (IS("reserved-bits")) h[2] = 1;
    send_all(l, h, sizeof h, 0);
  } else if (IS("version-future")) {
    raw_handshake(l, 2, 2);
  } else if (IS("version-inverted")) {
    raw_handshake(l, 1, 3);
  } else if (IS("mark-garbage")) {
    send_all(l, "GET / HTTP/1.0\r\n\r\n", 18, 0);
  } else if (IS("mark-eof")) {
    shutdown(l->fd, SHUT_WR);
  } else if (IS("hs-flood")) {
    uint8_t buf[256];
    int n = make_handshake(l, false, buf, sizeof buf);
    for (int i = 0; i < 1000 && !l->tcp_end; i++) send_all(l, buf, (size_t)n, 0);
    l->bad += 998; /* the first one is honest; counted once below */
  } else if (IS("hs-bad-offer")) {
    uint8_t buf[256];
    in_ring_name(l);
    int n = make_handshake(l, true, buf, sizeof buf);
    buf[R2S_FRAME_HDR_LEN + 32 + 1] = 0xff, buf[R2S_FRAME_HDR_LEN + 32 + 2] = 0xff;
    send_all(l, buf, (size_t)n, 0);
  } else {
    fprintf(stderr, "lying_peer: case %s not handled\n", kase);
    exit(2);
  }
  l->bad++;
  return await_close(l, 10) ? EXPECT_CLOSED : EXPECT_VERIFIED;
#undef IS
}

/* Connects l to the server, with its own queue pair if rdma, and its
 * stream session; dies on failure. */
static void liar_connect(liar_t *l, const char *host, int port, bool rdma, const struct sc_params *p)
{
  bool inprog = false;
  l->fd = sc_connect(host, port, false, &inprog);
  if (l->fd < 0) sc_die(SC_EXIT_FAIL, "lying_peer: connect: %s", strerror(errno));
  if (rdma) {
    struct pollfd pf = {l->fd, POLLOUT, 0};
    (void)poll(&pf, 1, 10000); /* the local address must be known */
    if (!(l->rd = lr_open(l->fd, IN_RING_SIZE, (uint8_t **)&l->in_mem, &l->out_ctl)))
      sc_die(SC_EXIT_FAIL, "lying_peer: no RDMA");
  }
  l->fetch_lfd = -1;
  l->s = sc_session_new(SC_CLIENT, l->fd, 1, p);
  if (!l->s) sc_die(SC_EXIT_FAIL, "lying_peer: out of memory");
}

int main(int argc, char **argv)
{
  static const struct option longopts[] = {
      {"port", required_argument, NULL, 'p'},   {"case", required_argument, NULL, 'c'},
      {"bytes", required_argument, NULL, 'b'},  {"timeout", required_argument, NULL, 't'},
      {"go-file", required_argument, NULL, 'g'}, {"watch-pid", required_argument, NULL, 'w'},
      {"host", required_argument, NULL, 'H'},   {"list", no_argument, NULL, 'l'},
      {NULL, 0, NULL, 0},
  };
  long port = -1, timeout = 60, wpid = 0;
  uint64_t bytes = 4 << 20;
  const char *kase = NULL, *host = "127.0.0.1";
  struct run_opts ro = {.cpu_max = 0.5};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'p':
      if (sc_parse_int(optarg, 1, 65535, &port) != 0) sc_die(SC_EXIT_USAGE, "bad --port");
      break;
    case 'c':
      kase = optarg;
      break;
    case 'H':
      host = optarg;
      break;
    case 'b':
      if (sc_parse_size(optarg, &bytes) != 0) sc_die(SC_EXIT_USAGE, "bad --bytes");
      break;
    case 't':
      if (sc_parse_int(optarg, 1, 3600, &timeout) != 0) sc_die(SC_EXIT_USAGE, "bad --timeout");
      break;
    case 'g':
      ro.go_file = optarg;
      break;
    case 'w':
      if (sc_parse_int(optarg, 1, 1 << 30, &wpid) != 0) sc_die(SC_EXIT_USAGE, "bad --watch-pid");
      ro.watch_pid = (int)wpid;
      break;
    case 'l':
      for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++)
        printf("%s\t%s\t%s\n", lies[i].name, lies[i].expect == EXPECT_VERIFIED ? "verified" : "closed",
               lies[i].what);
      return 0;
    default:
      sc_die(SC_EXIT_USAGE, "usage: lying_peer --port P --case NAME [--bytes N] [--timeout S] | --list");
    }
  }
  const lie_t *lie = kase ? find_lie(kase) : NULL;
  if (!lie || port < 0) sc_die(SC_EXIT_USAGE, "usage: lying_peer --port P --case NAME (--list for the cases)");
  sc_watchdog("lying_peer", (unsigned)timeout);

  static liar_t l, l2;
  /* The credit lies run one way at a time, so that the server's writer,
   * not its reader, is the one that meets the lie. */
  bool one_way = strncmp(lie->name, "head-", 5) == 0 || strncmp(lie->name, "rdma-head-", 10) == 0;
  struct sc_params p = {.seed = 4242, .c2s_bytes = bytes, .s2c_bytes = bytes, .flags = one_way ? 0 : SC_F_BIDIR};
  liar_connect(&l, host, (int)port, strncmp(lie->name, "rdma-", 5) == 0, &p);
  if (strcmp(lie->name, "rdma-other-conn") == 0) {
    p.seed++;
    liar_connect(&l2, host, (int)port, true, &p);
    second = &l2;
  }

  bool ok;
  enum expect got = run_case(&l, lie->name, &ro, &ok);
  if (!l.rd && (l.in_offered || l.in_mem)) shm_unlink(l.in_name);
  const char *err = sc_session_error(l.s);
  printf("lying_peer: case %s: outcome=%s bad_inputs=%" PRIu64 " verified=%" PRIu64 " tcp_end=%s%s%s\n", lie->name,
         got == EXPECT_VERIFIED ? "verified" : "closed", l.bad, got == EXPECT_VERIFIED ? l.s->rx_data_bytes : 0,
         !l.tcp_end ? "none" : l.tcp_err ? strerror(l.tcp_err) : "EOF", err[0] ? " stream: " : "", err);
  if (!ok || got != lie->expect) {
    fprintf(stderr, "lying_peer: case %s: expected outcome %s\n", lie->name,
            lie->expect == EXPECT_VERIFIED ? "verified" : "closed");
    return SC_EXIT_FAIL;
  }
  return 0;
}

/*
 * sc_stream: the verified byte stream that stream_check and fork_server
 * exchange, independent of how the bytes are moved.
 *
 * One connection carries, client to server:
 *     header (32 bytes: magic, flags, seed, c2s length, s2c length)
 *     c2s data (c2s length bytes)      trailer (8: hash of the c2s data sent)
 *     [FIN first, with SC_F_HALFCLOSE; the server then reads to EOF]
 * and server to client:
 *     s2c data (s2c length bytes)      trailer (16: hash of the c2s data
 *                                       received, hash of the s2c data sent)
 *     FIN (the server closes; the client reads to EOF)
 * Data byte i of each direction is a pure function of (seed, direction, i),
 * so the receiver checks every byte where it lands and names the first wrong
 * offset. The server sends s2c data once the header is in with SC_F_BIDIR
 * (both directions at once), otherwise only after the whole c2s stream; it
 * sends its trailer only once it has received everything.
 *
 * Use: the sender loops sc_tx_peek / write / sc_tx_commit; the receiver reads
 * at most sc_rx_want bytes into s->rxbuf and hands them to sc_rx_feed, and
 * reports EOF with sc_rx_eof. The tx side and the rx side may run on two
 * threads (one each); the few facts they share are atomics.
 * Functions returning int give 0 or -1 with a message in tx_err or rx_err.
 */
#ifndef SC_STREAM_H
#define SC_STREAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sc_net.h"

enum sc_role { SC_CLIENT, SC_SERVER };

enum {
  SC_F_HALFCLOSE = 1u << 0, /* client sends FIN, server reads to EOF first */
  SC_F_BIDIR = 1u << 1,     /* s2c data flows while c2s data does */
  SC_F_ZERO_READS = 1u << 2, /* both ends slip reads of no bytes between their reads (sc_io.h) */
};

struct sc_params {
  uint64_t seed;
  uint64_t c2s_bytes;
  uint64_t s2c_bytes;
  uint32_t flags;
};

typedef struct sc_session_s {
  enum sc_role role;
  int fd;
  unsigned id;            /* connection number, for messages */
  enum sc_peer_kind peer; /* set by whoever accepted the socket */
  struct sc_params p;     /* for a server, valid once hdr_known */
  bool hdr_known;

  /* Sender side: bytes generated but not yet written are kept in txbuf,
   * so a short write resends exactly what the kernel did not take. */
  int tx_phase;
  uint64_t tx_off; /* offset inside the current phase */
  uint8_t *txbuf;
  size_t tx_head, tx_len;
  uint64_t tx_sum; /* hash of the data written so far */
  uint64_t tx_data_bytes;
  uint64_t tx_rng;          /* write sizes and calls */
  atomic_bool tx_data_done; /* tx_sum is final (read by the rx side) */
  bool tx_shut;             /* shutdown(SHUT_WR) done (SC_F_HALFCLOSE) */
  uint64_t tx_rate;         /* bytes a second the sender averages at most, 0: no limit
                             * (set by the caller; sc_block_run paces by it) */
  double tx_start;          /* CLOCK_MONOTONIC seconds of its first write, 0: none yet */

  /* Receiver side. */
  int rx_phase;
  uint64_t rx_off;
  uint8_t rx_small[32]; /* header or trailer being assembled */
  uint8_t *rxbuf;       /* read target, SC_CHUNK_MAX bytes */
  uint8_t *peekbuf;     /* MSG_PEEK target, SC_CHUNK_MAX bytes */
  uint8_t *expbuf;      /* expected bytes, SC_CHUNK_MAX bytes */
  uint64_t rx_sum;
  uint64_t rx_data_bytes; /* data bytes verified */
  uint64_t rx_rng;
  atomic_bool rx_complete; /* all expected bytes (and EOF) are in */

  char tx_err[256];
  char rx_err[256];
} sc_session_t;

/* params is required for a client and ignored for a server. NULL on ENOMEM. */
sc_session_t *sc_session_new(enum sc_role role, int fd, unsigned id, const struct sc_params *params);
void sc_session_free(sc_session_t *s);
/* The first error recorded, or "" when there is none. */
const char *sc_session_error(const sc_session_t *s);

size_t sc_tx_peek(sc_session_t *s, size_t want, const uint8_t **data);
void sc_tx_commit(sc_session_t *s, size_t n);
bool sc_tx_pending(sc_session_t *s); /* sc_tx_peek would return bytes now */
bool sc_tx_done(sc_session_t *s);
/* True once a client that asked for SC_F_HALFCLOSE has sent its last byte
 * and not yet shut down its sending side; the caller then calls shutdown()
 * and sets tx_shut. */
bool sc_tx_wants_shutdown(sc_session_t *s);

size_t sc_rx_want(const sc_session_t *s); /* 0: only EOF (or nothing) left */
bool sc_rx_done(const sc_session_t *s);
int sc_rx_feed(sc_session_t *s, const uint8_t *data, size_t n);
int sc_rx_eof(sc_session_t *s);

int sc_tx_fail(sc_session_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sc_rx_fail(sc_session_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

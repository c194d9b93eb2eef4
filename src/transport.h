/*
 * transport.h - what a transport (shared memory, RDMA) gives the link.
 *
 * Contract:
 *  - The transports form a registry (transport/registry.c, one line each):
 *    the link names none of them. It asks the registry which transport
 *    serves a connection, and a transport's offer, in the HANDSHAKE, is
 *    opaque to everyone but that transport. A new transport is one file
 *    with an r2s_transport_t and one line in the registry.
 *  - A transport moves application bytes of one connection, in both
 *    directions, through rings owned by the receivers: each end offers its
 *    receive ring in its HANDSHAKE (offer), and attaches the ring its peer
 *    offered (attach), becoming that ring's only producer. The link decides
 *    when; the transport never touches the TCP socket.
 *  - offer() and attach() may fail (no memory, no device, a limit): the
 *    link then keeps the direction on TCP and counts why. Neither leaves
 *    anything behind on failure.
 *  - put/get/space/avail never block and return byte counts or -errno;
 *    -EPROTO means the peer broke the ring's rules (the connection is then
 *    reset), -EPIPE that the peer's reader is gone. A transport whose own
 *    resources run short for a moment (RDMA: no send slots) reports a full
 *    ring (0), and wakes that writer as it wakes one waiting for room.
 *  - Locks (docs/internals.md, "Locks"): the link calls put, space,
 *    connect, attach, close_tx and the wake-up hooks with its tx_lock
 *    held, get and avail with its rx_lock, which is why none of them may
 *    wait. offer(), flush() and release() may wait (for a device, for the
 *    peer): the link calls them with no lock held. A transport's own locks
 *    are taken under the link's and never the other way.
 *  - Wake-ups: a side about to sleep calls sleep_*(true), re-checks, and
 *    sleeps in the kernel on the connection's fd; the other side, after
 *    moving bytes, calls take_peer_*_sleeper(): if it returns true, it
 *    sends a DOORBELL frame over TCP, which makes the sleeper's fd readable
 *    (so the application's own poll/epoll on that fd wake too).
 *  - A transport whose end must be set up from the peer's HANDSHAKE
 *    before the peer may write (RDMA: the queue pair goes to RTR) has
 *    connect(); the link calls it when the peer's HANDSHAKE arrives and
 *    then sends READY, and with needs_ready set the link starts writing
 *    into the peer's ring only after the peer's READY.
 *  - A transport with its own progress (RDMA: the peer announces that it
 *    sleeps with a message only a thread of ours sees) calls
 *    conn->wake(conn->arg, fd) from that thread to have the link send a
 *    DOORBELL on fd (a duplicate of the connection's socket the transport
 *    owns). It never calls wake() after release() returned. wake() never
 *    waits for the link's locks: if tx_lock is taken, the doorbell is left
 *    for its holder to send.
 *  - release() is called once per process, when its last fd of the
 *    connection closes. It only undoes local things (mappings, a name not
 *    yet sealed, this process's queue pair, after the bytes already
 *    handed to it left): after fork() another process may still use the
 *    connection, and the peer learns of the end from TCP itself.
 */
#ifndef R2S_TRANSPORT_H
#define R2S_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "frame.h"
#include "path.h"

typedef struct r2s_link_s r2s_link_t;
typedef struct r2s_tp_state_s r2s_tp_state_t; /* each transport defines its own */

/* What a transport may know of the connection it serves. */
typedef struct r2s_tp_conn_s {
  int fd; /* the connection's socket (offer() may duplicate it, never keeps it) */
  struct sockaddr_storage local, peer;
  void (*wake)(void *arg, int fd); /* send a DOORBELL on fd (see above) */
  /* The channel under the rings failed and the transport's own thread
   * found it (see lost() below): the link fails over. Called as wake(),
   * with none of the transport's locks held, never after release(). */
  void (*lost)(void *arg, int fd);
  void *arg;
} r2s_tp_conn_t;

typedef struct r2s_transport_s {
  const char *name; /* as R2SOCK_TRANSPORT and a rule's transport= name it */
  int path;         /* r2s_path_t: how the statistics count its connections */
  bool needs_ready;
  /* Blocked calls learn how long to poll from their waits (spin.h). */
  bool adaptive_spin;
  /* Every wake-up a sleeper asks for (sleep_rx, sleep_tx) comes as a
   * DOORBELL on the socket: the peer sees the sleeping word at its next
   * put or get (shared memory: the two sides' words and indices are
   * fenced against each other). A wait over such rings may sleep without
   * a slice (wait.h). False where the announcement travels and a wake-up
   * can be missed (RDMA): such sleeps keep their slice. */
  bool wake_sure;

  /* How well this transport would serve a connection (conn: its
   * addresses), for the automatic choice (r2s__transport_choose): 0 when
   * it should not be chosen unless asked for by name; the highest rank
   * wins. Shared memory ranks a peer on this host above RDMA, which ranks
   * every peer. */
  int (*rank)(const r2s_tp_conn_t *conn);
  /* Creates this end's receive ring and describes it in *hs: its own
   * offer (r2s__handshake_add_offer, an offer kind of its own, frame.h),
   * and capability bits. */
  int (*offer)(r2s_tp_state_t **st, r2s_handshake_t *hs, const r2s_tp_conn_t *conn);
  /* Optional: prepares this end for the peer's writes (see above). */
  int (*connect)(r2s_tp_state_t *st, const r2s_handshake_t *peer);
  /* Checks the transport's offers in a peer's HANDSHAKE as they arrive:
   * -EPROTO for a malformed one (the link resets the connection, as for
   * any lie of the peer's), else 0, whether there is an offer or not. */
  int (*check)(const r2s_handshake_t *peer);
  /* Can this transport reach a peer that sent *peer (same host for shm)? */
  bool (*reaches)(const r2s_handshake_t *mine, const r2s_handshake_t *peer);
  /* Attaches the peer's ring described in *peer. */
  int (*attach)(r2s_tp_state_t *st, const r2s_handshake_t *peer);
  /* The peer has attached this end's ring: drop what let it find the ring
   * (the shm name), so no other process can. */
  void (*seal)(r2s_tp_state_t *st);
  /* Optional (shared memory): the peer's ring, which attach() could not
   * open by name (another user, another /dev/shm), had by descriptor
   * instead (transport/shm_fd.h). The taker asks with the address fetch()
   * fills in (a FETCH frame); the owner's hand_over() sends its ring there
   * and fills in the nonce (a HANDED frame); the taker's fetched() takes
   * it, after which the ring is attached as by attach(); fetched() with
   * no nonce gives up (the owner could not send it) and closes the
   * taker's socket. */
  int (*fetch)(r2s_tp_state_t *st, r2s_fetch_t *ask);
  int (*hand_over)(r2s_tp_state_t *st, const r2s_fetch_t *ask, uint8_t nonce[R2S_NONCE_LEN]);
  int (*fetched)(r2s_tp_state_t *st, const r2s_handshake_t *peer, const uint8_t nonce[R2S_NONCE_LEN]);

  /* producer side: into the peer's ring. space() is what makes the
   * connection writable; it may say 0 while a little room is free (shm:
   * less than a third of the ring, as the kernel does for TCP), and then
   * the peer rings only once there is that much. put() fills what fits. */
  ssize_t (*space)(r2s_tp_state_t *st);
  ssize_t (*put)(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max);
  /* consumer side: from this end's ring */
  ssize_t (*avail)(r2s_tp_state_t *st);
  ssize_t (*get)(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek);

  /* Optional (NULL: 0, not said): when the oldest bytes in this end's
   * ring came, as a count of r2s__order_stamp() (clock.h), for ordering
   * the readiness of several connections as the kernel's epoll does;
   * 0 when the ring is empty or the peer did not say. */
  uint64_t (*filled_at)(r2s_tp_state_t *st);
  /* Optional (NULL: 0): bytes this end put into the peer's ring that the
   * peer has not taken, as its last published head says (the peer's
   * close_rx with bytes unread is a reset, as TCP's close). */
  uint64_t (*unread)(r2s_tp_state_t *st);
  /* bytes this end ever put into the peer's ring / took from its own */
  uint64_t (*produced)(r2s_tp_state_t *st);
  uint64_t (*consumed)(r2s_tp_state_t *st);

  /* Optional (NULL: the ring alone bounds what a writer has in flight):
   * the socket's buffer sizes as the kernel reports them. sndbuf is 0
   * unless the application set SO_SNDBUF: then, as over TCP, the bytes
   * this end put into the peer's ring and the peer has not read stay
   * within that send buffer plus the peer's receive buffer, and a writer
   * blocks (or gets EAGAIN) once they reach it, where a test or a program
   * that sized its buffers to see back-pressure expects it. rcvbuf is
   * published for the peer's producer. Called after offer() and whenever
   * the application sets either; any thread, never blocks. */
  void (*size_buffers)(r2s_tp_state_t *st, uint32_t sndbuf, uint32_t rcvbuf);

  /* wake-ups (see above) */
  void (*sleep_rx)(r2s_tp_state_t *st, bool on);    /* waiting for bytes */
  void (*sleep_tx)(r2s_tp_state_t *st, bool on);    /* waiting for space */
  bool (*take_peer_rx_sleeper)(r2s_tp_state_t *st); /* after put */
  bool (*take_peer_tx_sleeper)(r2s_tp_state_t *st); /* after get */
  /* Optional (NULL: never): the peer last ran on the CPU the caller runs
   * on, so polling for it cannot succeed until the caller yields. A hint. */
  bool (*peer_shares_cpu)(r2s_tp_state_t *st);

  /* Optional (NULL: the rings fail only with the connection): failover,
   * docs/protocol.md "Failover". lost() says that the channel under the
   * rings failed while the TCP connection may live (RDMA: the queue pair
   * or the device); from then on put() and space() say 0, get() and
   * avail() see no new bytes, and no call fails for it. Any thread, no
   * lock needed.
   * stop() ends this end's use of the rings for good, lost or not: no
   * byte the peer writes into our ring from now on is read, nothing more
   * goes into the peer's, and peer_tx_closed() says false (the end of the
   * stream comes by TCP). It returns in *rx_end where our ring ends: the
   * bytes before it can be read, and the peer resends the rest over TCP.
   * That lies between what we consumed and what arrived, and not before a
   * close of the peer's that we saw. A second call returns the same.
   * Both link locks held; does not wait.
   * unacked() gives the bytes this end put into the peer's ring that the
   * peer may lack: from the peer's head as this end last saw it (*from,
   * a stream offset) to produced(), in at most two pieces (the count, or
   * -EPROTO for a head the peer broke); valid until release(). tx_lock
   * held. */
  bool (*lost)(r2s_tp_state_t *st);
  int (*stop)(r2s_tp_state_t *st, uint64_t *rx_end);
  int (*unacked)(r2s_tp_state_t *st, uint64_t *from, struct iovec iov[2]);

  /* The peer's producer said it will write no more (after its last byte). */
  bool (*peer_tx_closed)(r2s_tp_state_t *st);
  /* This end will write no more: the peer reads end of stream after the
   * bytes already in its ring. */
  void (*close_tx)(r2s_tp_state_t *st);
  /* Optional (NULL: the peer learns of the end from TCP alone): this
   * end's application closed the connection and reads no more, as the
   * kernel's close does for a socket; from then on the peer's space() and
   * put() fail with -EPIPE. Called only by a process that holds the
   * connection alone (not shared by fork). */
  void (*close_rx)(r2s_tp_state_t *st);
  /* Returns once every byte put (and close_tx) is in the peer's ring, or
   * after a bounded wait: the link calls it before the kernel sends our
   * FIN, which must not overtake them. */
  void (*flush)(r2s_tp_state_t *st);
  /* flush() waits for the peer's side to acknowledge (RDMA: its device).
   * A peer that died after its kernel sent our socket a FIN never does;
   * before such a flush the link makes a gone peer's kernel answer with a
   * reset (a DOORBELL it cannot deliver), which flush() watches for. */
  bool flush_waits_for_peer;
  void (*release)(r2s_tp_state_t *st);
} r2s_transport_t;

/* One of at most max slots counted by *live (a process's wide rings):
 * true if taken; r2s__tp_slot_give hands it back. Lock-free: a take that
 * overshoots gives its count back at once. */
static inline bool r2s__tp_slot_take(unsigned *live, unsigned max)
{
  if (__atomic_add_fetch(live, 1, __ATOMIC_RELAXED) <= max) return true;
  __atomic_sub_fetch(live, 1, __ATOMIC_RELAXED);
  return false;
}

static inline void r2s__tp_slot_give(unsigned *live)
{
  __atomic_sub_fetch(live, 1, __ATOMIC_RELAXED);
}

extern const r2s_transport_t r2s__transport_shm;
extern const r2s_transport_t r2s__transport_rdma;

/* The transport for a connection (transport/registry.c): the one named
 * `wanted` (NULL: any), else the one of highest rank above 0; NULL if
 * none. */
const r2s_transport_t *r2s__transport_choose(const char *wanted, const r2s_tp_conn_t *conn);
/* Every transport's check() of a peer's HANDSHAKE: 0 or -EPROTO. */
int r2s__transports_check(const r2s_handshake_t *peer);

/* At process exit: removes ring names whose creator died (shm.c), in a
 * process that made a ring or was told (r2s__shm_peer_may_offer) that it
 * speaks the protocol on a connection, whose peer may make one for it. */
void r2s__shm_exit(void);
void r2s__shm_peer_may_offer(void);
/* At process exit: lets bytes already posted to RDMA queue pairs leave
 * (up to ms milliseconds in all), as the kernel does for TCP (rdma.c). */
void r2s__rdma_exit(int ms);

#endif

/*
 * link.h - the upgrade protocol of one connection, and the byte stream the
 * application sees once its peer runs r2sock too.
 *
 * Contract (docs/protocol.md is the wire side):
 *  - A connection gets a link when it is established and the policy lets it
 *    try an upgrade: the link sends the urgent hello, then watches both
 *    directions. A connection without a link, or whose link has settled on
 *    plain TCP in both directions (r2s__link_passthrough), is served by the
 *    kernel alone: the wrappers call libc directly.
 *  - Each direction has its own state. Receive: PROBE (is the peer a shim?),
 *    PREMARK (it is; application bytes until its switch mark), PLAIN,
 *    FRAMES (frames over TCP, application bytes in DATA frames), RING
 *    (application bytes in our receive ring; TCP carries control frames).
 *    Send: PROBE, PLAIN, FRAMES, RING, mirror images.
 *  - A sender that waits for the peer's control frames (its HANDSHAKE,
 *    READY, RING or DECLINE) reads the application bytes in front of them
 *    into the link's read-ahead buffer (readahead.h, bounded): every read,
 *    peek, FIONREAD, SIOCATMARK and poll answer counts those bytes first.
 *  - rx_lock serialises receivers, tx_lock senders. Lock order: rx, then tx.
 *    A path that holds tx_lock only ever *tries* rx_lock.
 *  - The r2s__link_* I/O functions never block and never touch errno: they
 *    return a byte count, 0 for end of stream, or -errno (-EAGAIN when
 *    nothing can move now). Blocking, timeouts, MSG_WAITALL and SIGPIPE are
 *    stream.c's business, on top of these.
 *  - The fd passed in is any fd of the connection (dup'd fds share a link);
 *    the link never stores or closes one. Where a function takes fd < 0
 *    (r2s__link_poll, r2s__link_pump) it makes no system call.
 *  - The entry points below are grouped by who calls them: connection
 *    setup and process life, the stream and socket semantics, readiness
 *    and waits.
 */
#ifndef R2S_LINK_H
#define R2S_LINK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "options.h"

typedef struct r2s_link_s r2s_link_t;

typedef enum { R2S_RX_PROBE, R2S_RX_PREMARK, R2S_RX_PLAIN, R2S_RX_FRAMES, R2S_RX_RING } r2s_rx_state_t;
typedef enum { R2S_TX_PROBE, R2S_TX_PLAIN, R2S_TX_FRAMES, R2S_TX_RING } r2s_tx_state_t;

/* ---- Connection setup and process life (conn.c, init.c, statseg.c) ---- */

typedef enum {
  /* A freshly established connection: the hello goes on fd now. */
  R2S_LINK_CONNECTED,
  /* ... accepted: its hello goes only once the peer's has come, so that a
   * plain client never sees urgent data (docs/protocol.md, "Hello"). */
  R2S_LINK_ACCEPTED,
  /* The application set SO_OOBINLINE before the socket was connected: no
   * hello, and the peer's hello kept out of the data. */
  R2S_LINK_OOBINLINE,
  /* A connected socket inherited across exec: its maker may have started
   * the protocol, so the receive side keeps watching for the peer's switch
   * (and then reads its DATA frames); the send side stays plain. */
  R2S_LINK_ADOPTED,
} r2s_link_kind_t;

typedef struct r2s_link_how_s {
  r2s_link_kind_t kind;
  /* CONNECTED and ACCEPTED: the connection's (conn.c: the options', or
   * the rules file's), copied. */
  const r2s_policy_t *policy;
  /* Made for a socket inherited across exec that no byte ever left
   * (conn.c): other processes may hold it too, so it begins the protocol
   * only if it writes first. */
  bool inherited;
  /* Called once the first direction of the connection enters a ring,
   * with the ring's r2s_path_t, until the reaper takes the link over;
   * NULL: not called. */
  void (*on_upgrade)(void *arg, int path);
  void *arg;
} r2s_link_how_t;

/* A link for a connection (how->kind); NULL if the policy says no or the
 * hello could not be sent (the connection then stays plain TCP). */
r2s_link_t *r2s__link_start(int fd, const r2s_link_how_t *how);

/* Drops a reference: the connection's own, when it is freed. The link
 * goes once the reaper, which reads a closed connection on with it, is
 * done too. */
void r2s__link_free(r2s_link_t *l);

/* In a fork() child (conn.c's handler, for every live connection): the
 * link's locks start unlocked, whatever thread of the parent held them. */
void r2s__link_fork_child(r2s_link_t *l);
/* At exit: gives the threads still resending a failover's bytes
 * (failover.c) up to ms milliseconds to finish. */
void r2s__link_failover_exit(int ms);

/* The process is about to confine its system calls (sandbox.h): a link on
 * which nothing of the protocol is under way settles on plain TCP in both
 * directions (pass-through), without a system call; returns whether it
 * did. Links in the middle of a switch are left as they are. */
bool r2s__link_sandbox(r2s_link_t *l);

/* What the link says about the connection now, for the statistics: the
 * path each direction's application bytes take (*rx, *tx: r2s_path_t; the
 * byte counts use r2s_link_moved_t), and why it is (still) on TCP (*why:
 * an r2s_reason_t, NONE if upgraded). Only what is asked for (non-NULL) is
 * looked at: the reason reads fields that the threads doing the link's
 * I/O write while it is still deciding (statseg.c asks for it only once
 * the link is in pass-through). */
void r2s__link_info(const r2s_link_t *l, int *rx, int *tx, int *why);

/* Links not (yet) in pass-through, in this process (atomic): while 0,
 * the wrappers of waits (poll, select, epoll) call libc directly. */
extern unsigned r2s__links_active;

/* Whether the link answers for readiness the kernel cannot see: one of
 * its directions went into frames or a ring, or it failed (it stays so).
 * Until then, polling or arming it tells nothing the kernel does not.
 * r2s__link_activations (atomic) counts the links that became so; each
 * also pokes the waits sleeping without a slice (poke.h). */
bool r2s__link_active(const r2s_link_t *l);
extern unsigned long r2s__link_activations;

/* Read on every wrapped call: inline, from the struct's first member (an
 * int, as conn.h reads it too; link/internal.h asserts the layout). */
static inline bool r2s__link_passthrough(const r2s_link_t *l)
{
  return __atomic_load_n((const int *)l, __ATOMIC_ACQUIRE) != 0;
}

/* The link's rx_lock or tx_lock itself, for the test that forks while
 * another thread holds it (tests/unit/hold_lock.c); the shim never calls
 * it. */
pthread_mutex_t *r2s__link_lock(r2s_link_t *l, bool tx);

/* ---- Stream and socket semantics (stream.c, preload/, sockopt.c) ---- */

/* Which way the bytes of one r2s__link_recv or r2s__link_send went: `ring`
 * of them through the transport's ring (on `ring_path`, an r2s_path_t),
 * the rest over TCP. Filled by the call itself, under the direction's
 * lock, because another thread may switch the direction right after it
 * returns: a path looked up before or after the call can name the wrong
 * one. May be NULL. */
typedef struct r2s_link_moved_s {
  size_t ring;
  int ring_path;
} r2s_link_moved_t;

/* Nonblocking stream operations (see the contract above). flags: MSG_PEEK
 * for recv; MSG_MORE is ignored. A recv's iov describes at least one byte:
 * 0 is the end of the stream, so an empty read cannot be told from it
 * (stream.c answers those itself); an empty one gets -EINVAL and leaves
 * the link as it was. The ring case (our ring has bytes for the reader,
 * the peer's ring room for the writer, nothing else to send or read
 * first) is the first thing each looks at, and then all it does. */
ssize_t r2s__link_recv(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv);
ssize_t r2s__link_send(r2s_link_t *l, int fd, const struct iovec *iov, int cnt, int flags,
                       r2s_link_moved_t *mv);

/* send(MSG_OOB) on a carried connection. Urgent data cannot travel through
 * a ring, so the direction goes back to plain TCP for good: the bytes
 * before the urgent one go the current way, a PLAIN frame tells the peer
 * where the ring ends, and the urgent byte leaves through the kernel. Waits
 * (or -EAGAIN) until the peer has read past our switch mark, so the new
 * urgent pointer cannot hide it. Returns bytes sent or -errno. */
ssize_t r2s__link_send_oob(r2s_link_t *l, int fd, const void *buf, size_t len, int flags, bool nonblock);

/* The application uses urgent data: our send direction, if not yet
 * switched, stays plain for good. (The receive direction is the peer's to
 * switch; urgent bytes racing a switch are a documented limitation.) */
void r2s__link_app_oob(r2s_link_t *l, int fd);

/* The application needs the kernel's own send path: with SO_ZEROCOPY its
 * MSG_ZEROCOPY sends are acknowledged on the socket's error queue, which
 * only the kernel's TCP fills. Our send direction, if not yet switched,
 * stays plain for good (once switched it stays so: such sends then get
 * no acknowledgement, README, Limitations). */
void r2s__link_kernel_tx(r2s_link_t *l, int fd);

/* shutdown(2) on a link: flushes what the peer must still see first. */
int r2s__link_shutdown(r2s_link_t *l, int fd, int how);

/* The last fd of the connection is being closed: flush control bytes,
 * tell the peer's producer we are gone. used: this process moved bytes on
 * it; one inherited across exec and never used here may still be another
 * process's, so it gets no background close (whose FIN would end that
 * process's direction too). */
void r2s__link_close(r2s_link_t *l, int fd, bool used);

/* ioctl(2) requests a carried connection answers itself: FIONREAD (the
 * bytes readable without blocking, read-ahead first) and SIOCATMARK (0
 * while ring bytes come first, else the kernel's mark, the shim's own
 * left out). Returns the value, or -errno (-EINVAL for another request). */
ssize_t r2s__link_ioctl(r2s_link_t *l, int fd, unsigned long req);

/* The application sets an option the link shadows, to v: 0 or -errno
 * (-ENOPROTOOPT for another one).
 *  - TCP_NODELAY, TCP_CORK (IPPROTO_TCP): while our send direction
 *    carries the shim's frames the shim keeps Nagle off and the cork out
 *    (a doorbell held back costs the peer 40 ms): v is kept aside and
 *    given to the kernel when the direction goes plain TCP again; else it
 *    goes to the kernel now.
 *  - SO_OOBINLINE (SOL_SOCKET), on a connected socket: while the receive
 *    direction is not plain TCP the peer's hello or switch mark may lie in
 *    front of the reader, and the kernel would hand it out inline as data:
 *    the kernel's flag stays the shim's (off) and v is kept until the
 *    direction is plain, then given to the kernel.
 * r2s__link_getsockopt: the application's value of such an option while
 * it is kept aside (0 or 1), else -1: the kernel's own answer stands. */
int r2s__link_setsockopt(r2s_link_t *l, int fd, int level, int name, int v);
int r2s__link_getsockopt(r2s_link_t *l, int level, int name);

/* The application set SO_SNDBUF (sndbuf) or SO_RCVBUF on fd, or had set
 * it before the link existed (on the socket or its listener): the rings
 * honour the sizes as TCP does (transport.h, size_buffers). */
void r2s__link_sized_buffers(r2s_link_t *l, int fd, bool sndbuf);

/* ---- Readiness and waits (poll_select.c, epoll_*.c, ready_conn.c, wait.c,
 * stream.c) ---- */

/* Readiness the kernel cannot see. For the bits of `events` the link owns
 * now (*owned: POLLIN while the peer's bytes come in frames or the ring,
 * POLLOUT while ours go into the ring) it returns the answer; the kernel's
 * answer stands for every other bit. May read control frames from fd.
 * Without a socket (fd < 0, for spinning) it looks at the rings alone,
 * with no system call and no lock: bytes in our ring (or read ahead), room
 * in the peer's; owned is not used. */
short r2s__link_poll(r2s_link_t *l, int fd, short events, short *owned);

/* When the oldest bytes waiting in the link's ring came, as a count of
 * r2s__order_stamp(); 0 if not known (not in a ring, empty, or a
 * transport or peer that does not say). No lock, no system call. */
uint64_t r2s__link_filled_at(r2s_link_t *l);

/* Whether the rings alone carry `events` now (the peer's bytes come through
 * our ring, ours go into the peer's): then r2s__link_poll without a socket
 * answers for them until the next look at the socket. */
bool r2s__link_in_rings(r2s_link_t *l, short events);

/* The receive direction's state now (r2s_rx_state_t; it may change right
 * after): which kernel events carry news for it while it waits. */
int r2s__link_rx_state(const r2s_link_t *l);

/* Whether a lone urgent byte of the peer's (its hello, with nothing behind
 * it yet) is news for a reader that waits: only before the peer is known,
 * and only where the policy would let a switch follow it now (now, or the
 * size already moved). A reader's wait then watches POLLPRI, and a read
 * that finds nothing looks at the mark; elsewhere the hello is taken with
 * the bytes behind it, and a short connection's reader is woken once, by
 * its response, as on TCP. */
bool r2s__link_wants_lone_marks(const r2s_link_t *l);

/* Whether the urgent byte the peer sent last is the shim's own (its hello
 * at the start of the stream, or its switch mark), not the application's:
 * POLLPRI and select()'s exceptfds leave it out. */
bool r2s__link_urgent_is_shims(r2s_link_t *l, int fd);

/* Reads the control frames waiting on the socket (doorbells), if no
 * application bytes stand in front of them. Never blocks. Without a socket
 * (fd < 0: the kernel reported it readable), the next look reads them. */
void r2s__link_pump(r2s_link_t *l, int fd);

/* For EPOLLET (epoll_wait.c): a count that moves whenever the ring's side
 * of `bit` (POLLIN: bytes arrived, or the end of the stream; POLLOUT: room
 * freed by the peer) changes, so that a bit still ready but unchanged since
 * it was last reported is no new edge. False when the link cannot tell
 * now (not in its ring, another thread holds the direction, the end or an
 * error reached): the bit is then reported level-triggered. */
bool r2s__link_edge_gen(r2s_link_t *l, short bit, uint64_t *gen);

/* Before sleeping in the kernel on fd for `events`: ask the peer for a
 * doorbell, then re-check. Returns the events ready right now (0: sleep).
 * r2s__link_unarm() after waking: each arm is undone by one unarm (the
 * link counts the waits armed on it, see r2s__link_wakes_sure). */
short r2s__link_arm(r2s_link_t *l, int fd, short events);
void r2s__link_unarm(r2s_link_t *l, short events);

/* Whether, armed, every change of the link wakes a wait asleep in the
 * kernel on its socket: a doorbell (the transport's wake_sure), a frame,
 * the peer's end, or a poke from a thread that took one of those or
 * changed the link (poke.h). False while a sender may read the peer's
 * bytes ahead (r2s__link_may_read_ahead), or while a direction is in the
 * ring of a transport whose wake-ups can be missed: then the wait keeps
 * its slice (wait.h). */
bool r2s__link_wakes_sure(r2s_link_t *l);

/* A quiet link: one an epoll set found idle for long, armed on its own
 * account (not a wait's) for POLLIN, and for POLLOUT too where the entry
 * wants to write, and left to the kernel, so that the set's waits no
 * longer look at it. Armed, any byte of the peer's, and any room it makes
 * in a ring we filled, comes with a doorbell the kernel reports on the
 * socket. The arm is given back, and every set made to look at all its
 * connections again (r2s__link_activations), by whatever could change the
 * link's readiness unseen by the kernel: a read or a write of the link,
 * its shutdown, a frame or doorbell taken from its socket (lk_changed), a
 * change of its states, an epoll_ctl on it (r2s__link_unquiet).
 * r2s__link_quiet returns whether the link is quiet now for `events`
 * (POLLIN, and POLLOUT if asked): not if it cannot be (no ring to read,
 * or its wake-ups can be missed: r2s__link_wakes_sure), has bytes to
 * read, stopped being quiet after idle_since (a link that keeps waking
 * stays looked at), or is quiet for less than asked (for another set's
 * entry). r2s__link_quiet_events says what a quiet link answers for (0:
 * it is not quiet). */
bool r2s__link_quiet(r2s_link_t *l, int fd, short events, int64_t idle_since);
short r2s__link_quiet_events(const r2s_link_t *l);
void r2s__link_unquiet(r2s_link_t *l);

/* How long a wait for `events` should poll the ring first (spin.h; a wait
 * on this link alone may probe). Sets *yield_now if the peer last ran on
 * the CPU this thread runs on (a hint, see transport.h peer_shares_cpu):
 * a poll for it should yield at once. */
int64_t r2s__link_spin_budget(r2s_link_t *l, short events, bool may_probe, bool *yield_now);
/* What a wait for `events` taught: it ended after waited_ns with the ring
 * ready (answered) or not. */
void r2s__link_spin_learn(r2s_link_t *l, short events, int64_t waited_ns, bool answered);
/* How long a wait for `events` that has lasted waited_ns should nap (sleep
 * in the kernel without asking the peer for a doorbell) before it looks
 * at the ring again: a reader of a stream only (spin.h), and its wait for
 * room too if it waits for both (an epoll entry for EPOLLIN|EPOLLOUT);
 * 0: arm and sleep. */
int64_t r2s__link_nap_ns(r2s_link_t *l, short events, int64_t waited_ns);

/* A blocking read's poll of our ring alone, before its first read
 * (stream.c): under emulation each layer between the application's read
 * and the ring lengthened a 64 B round trip (docs/rdma.md, "A short way
 * for ring reads and writes"), so this one loop does what the stream's
 * wait would for that case. It looks at the ring (bytes, the read-ahead,
 * the peer's end, an error, the ring's end after PLAIN) once, and while it
 * has nothing, polls it for the link's spin budget (spin.h), learning from
 * the wait. If the whole budget passed without an answer, *began is when
 * the poll began: the caller's wait then sleeps without polling again. */
void r2s__link_spin_rx(r2s_link_t *l, int64_t *began);

/* Whether a sender may now move the peer's bytes from the socket into the
 * read-ahead buffer (it waits for the peer's handshake or READY, for at
 * most a second since it switched: a peer that never answers leaves the
 * link on frames, and its idle readers must not wake every slice): a
 * reader asleep in the kernel meanwhile is not woken by that, so its
 * sleeps are kept short while it may happen. */
bool r2s__link_may_read_ahead(r2s_link_t *l);

/* DOORBELL frames read on this link so far, by any thread: a sleeper whose
 * slice ran out compares it with the count before its sleep to tell a
 * doorbell another thread took (stream.c). */
uint32_t r2s__link_bells_read(const r2s_link_t *l);

#endif

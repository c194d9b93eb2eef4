/*
 * stats.h - process-wide counters.
 *
 * Contract:
 *  - Every counter is one row of R2S_STATS (name, doc); the struct, the names
 *    and the printer are generated from it, so a counter is added in one place.
 *  - Counters are 64-bit, updated with relaxed atomics: they are statistics,
 *    never used for synchronisation. A name that ends in _now is a gauge,
 *    not a count: it goes down as well as up (r2s__stat_sub), and readers
 *    show it as it stands (r2sock-stat exports it as a Prometheus gauge). Hot per-byte counting happens in each
 *    connection and is folded in here when the connection ends (and for live
 *    connections when the process exits), so no cache line is shared by all
 *    threads on the data path.
 *  - Counts go to *r2s__stats_live: r2s__stats until the process makes its
 *    live-statistics segment (statseg.h), whose header then holds them; a
 *    snapshot sums both, so an add that raced the switch is not lost.
 *  - The exit line has one fixed, parseable format, one line per process:
 *        r2sock[PID] stats: name=value name=value ...
 *    Tests and tools parse it; change it only together with them.
 */
#ifndef R2S_STATS_H
#define R2S_STATS_H

#include <stddef.h>
#include <stdint.h>

/* X(name, doc) */
#define R2S_STATS(X)                                                                                         \
  X(conn_seen, "TCP connections established through connect or accept")                                      \
  X(conn_tcp, "connections that stayed on kernel TCP")                                                       \
  X(conn_shm, "connections upgraded to shared memory")                                                       \
  X(conn_rdma, "connections upgraded to RDMA")                                                               \
  X(rings_by_fd, "shared-memory rings of peers taken by file descriptor (another user, another /dev/shm)")   \
  X(rings_wide, "shared-memory rings made 8 MiB wide because the CPUs were contended")                      \
  X(tcp_disabled, "stayed on TCP: R2SOCK_UPGRADE=never, a denied port or program")                           \
  X(tcp_peer_plain, "stayed on TCP: the peer does not run r2sock")                                           \
  X(tcp_no_peer_yet, "stayed on TCP: ended before the peer sent anything")                                   \
  X(tcp_unfinished, "stayed on TCP: ended before the upgrade completed")                                     \
  X(tcp_no_resources, "stayed on TCP: no ring could be made or mapped")                                      \
  X(tcp_unreachable, "stayed on TCP: peer on another host, no transport reaches it")                         \
  X(tcp_app_oob, "stayed on TCP: the application uses urgent data")                                          \
  X(tcp_failed, "reset after a protocol error from the peer")                                                \
  X(tcp_no_hello, "stayed on TCP: the hello could not be sent")                                              \
  X(tcp_other_user, "stayed on TCP: the peer runs as another user")                                          \
  X(tcp_no_device, "stayed on TCP: a remote peer, and no RDMA device for the connection's address")          \
  X(tcp_short, "stayed on TCP: ended before moving the R2SOCK_UPGRADE size (auto: 64K)")                     \
  X(tcp_rule, "stayed on TCP: a rule of the rules file says upgrade=never")                                  \
  X(tcp_fastopen, "stayed on TCP: the application connected with TCP Fast Open (TCP_FASTOPEN_CONNECT)")      \
  X(tcp_zerocopy, "sent over TCP: the application asked for zero-copy sends (SO_ZEROCOPY)")                  \
  X(reset_protocol, "connections reset because the peer broke the protocol (a bad frame or ring index)")     \
  X(reset_rdma, "RDMA connections reset: a work request, the queue pair or the device failed")               \
  X(failovers, "connections whose ring channel failed under them (RDMA) and that went on over TCP, losing nothing") \
  X(rdma_rings_small, "RDMA rings made smaller than the auto size to fit the process's RDMA memory budget")     \
  X(rdma_no_budget, "RDMA offers not made: the process's RDMA memory budget had no room (the connection stayed on TCP)") \
  X(rdma_memory_bytes_now, "bytes held for RDMA rings now (a gauge): rings, credit pages and copies of peers' rings, as the RDMA memory budget counts them") \
  X(rdma_drain_failed, "RDMA closes whose last writes went unacknowledged (the peer was gone)")              \
  X(listeners, "TCP sockets that listened")                                                                  \
  X(sockets_adopted, "TCP sockets the shim did not create (inherited) but learned of")                       \
  X(bytes_tcp_tx, "payload bytes sent over kernel TCP on tracked connections")                               \
  X(bytes_tcp_rx, "payload bytes received over kernel TCP on tracked connections")                           \
  X(bytes_shm_tx, "payload bytes sent through shared memory")                                                \
  X(bytes_shm_rx, "payload bytes received through shared memory")                                            \
  X(bytes_rdma_tx, "payload bytes sent over RDMA")                                                           \
  X(bytes_rdma_rx, "payload bytes received over RDMA")                                                       \
  X(forks, "fork() calls this process made")                                                                 \
  X(waits_sleep, "times a blocked call slept in the kernel")                                                 \
  X(waits_slice_expired, "sleeps that ran their whole 100 ms slice (a missed doorbell costs one)")           \
  X(waits_unsliced, "sleeps of an epoll wait that needed no slice: every change of its links wakes it")      \
  X(pokes, "epoll waits sleeping without a slice woken: another thread took a link's wake-up or changed it") \
  X(links_quiet, "idle connections in their rings that an epoll set left to the kernel until they woke")     \
  X(waits_woke_early, "sleeps of a blocked send or receive that woke with no room or bytes for it yet")      \
  X(waits_polled, "poll, select and epoll_wait calls that polled rings before they slept or were answered")  \
  X(waits_nap, "times a blocked reader of a stream napped: slept briefly without asking for a doorbell")     \
  X(doorbells, "doorbell frames sent to wake a sleeping peer")                                               \
  X(oob_fallbacks, "directions sent back to plain TCP because the application sent urgent data")             \
  X(room_fallbacks, "directions sent back to plain TCP because their ring could not grow (/dev/shm full)")   \
  X(exit_lingered, "connections still being finished at exit, handed to a lingering process")                \
  X(closes_reaped, "closes finished in the background, as the peer might still send frames (reaper)")         \
  X(io_uring_refused, "io_uring_setup calls through syscall() answered ENOSYS: the shim cannot see into a ring")

typedef enum {
#define R2S_STAT_ENUM(name, doc) R2S_STAT_##name,
  R2S_STATS(R2S_STAT_ENUM)
#undef R2S_STAT_ENUM
      R2S_STAT_COUNT
} r2s_stat_id_t;

typedef struct r2s_stats_s {
  uint64_t v[R2S_STAT_COUNT];
} r2s_stats_t;

extern r2s_stats_t r2s__stats;
extern r2s_stats_t *r2s__stats_live; /* atomic */

static inline void r2s__stat_add(r2s_stat_id_t id, uint64_t n)
{
  __atomic_fetch_add(&__atomic_load_n(&r2s__stats_live, __ATOMIC_RELAXED)->v[id], n, __ATOMIC_RELAXED);
}
#define R2S_STAT_INC(name) r2s__stat_add(R2S_STAT_##name, 1)

/* For a gauge (a name ending in _now): unsigned arithmetic, so an add and
 * a sub of the same n cancel whatever the order. */
static inline void r2s__stat_sub(r2s_stat_id_t id, uint64_t n)
{
  r2s__stat_add(id, (uint64_t)0 - n);
}

const char *r2s__stat_name(r2s_stat_id_t id);

/* Copies the counters (relaxed loads) into *out. */
void r2s__stats_snapshot(r2s_stats_t *out);

/* From now on counts go to *to (zeroed memory); what was counted so far
 * moves there too. */
void r2s__stats_move(r2s_stats_t *to);

/* Zeroes every counter and counts in r2s__stats again: the child of a fork
 * starts its own account (after forgetting its parent's segment). */
void r2s__stats_reset(void);

/* Formats "r2sock[PID] stats: a=1 b=2 ...\n" into buf; returns the length,
 * truncated at len-1 (the buffer in use is sized for every counter). */
size_t r2s__stats_format(const r2s_stats_t *s, char *buf, size_t len);

#endif

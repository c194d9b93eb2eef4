/*
 * rdma.h - what the RDMA transport (rdma.c) needs from its devices
 * (rdma_dev.c): the device, port and GID that own a connection's address,
 * the per-process verbs objects, and the progress thread.
 *
 * Contract:
 *  - r2s__rdma_port_for(local, &port) finds the RDMA port for a TCP
 *    connection's local address: the device and port the kernel's RDMA
 *    CM binds that address to (librdmacm, RoCE and InfiniBand alike), and
 *    on it the GID table entry of the address (RoCE v2 before v1,
 *    rdma_gid.h) or the one R2SOCK_GID_INDEX names. R2SOCK_DEVICE names
 *    the only device the address may resolve to; with R2SOCK_GID_INDEX
 *    set and no port owning the address, the first active port of
 *    R2SOCK_DEVICE (or of the first device) serves. Returns 0 or -ENODEV
 *    (no such device, none up, no GID for the address), -ENOENT (no
 *    libibverbs or no librdmacm). On success it holds a reference on
 *    port.dev for the caller, dropped with r2s__rdma_dev_put(). A device
 *    is opened once per process and closed by its progress thread once
 *    nothing has held it for 2 s (a process must not keep a device open
 *    that the administrator removes: the kernel waits for it). librdmacm
 *    keeps a context of its own open on each device it resolved an
 *    address to, until it sees the device gone; the shim uses only that
 *    context's device name.
 *  - After fork() a child never touches its parent's verbs objects (they
 *    live in a file description both share): devices are per process
 *    (the child opens its own), and r2s__rdma_fork_gen changes in the
 *    child, so a connection's state made before the fork knows it is
 *    not its own.
 *  - Each connection registers its state with r2s__rdma_track(); the
 *    progress thread of its device then calls r2s__rdma_on_event(st) for
 *    every completion event of the state's receive CQ, and
 *    r2s__rdma_on_fatal(st) when its queue pair or its device fails (the
 *    device's asynchronous events), and r2s__rdma_on_tick(st) once a
 *    second. r2s__rdma_untrack() returns only once
 *    the thread is done with the state; after destroying its verbs
 *    objects the state drops its device reference.
 *  - Locks: devs_lock, then live_lock (rdma_dev.c). devs_lock is held only
 *    to look a device up and count a reference, or to list or unlist one:
 *    a device is opened (libibverbs, its progress thread) and the RDMA CM
 *    asked with no lock held. A connection's post_lock and rx_lock
 *    (rdma_conn.h) are leaves, taken under a link lock and never held
 *    across a wait (the drain lets post_lock go while it sleeps). The
 *    progress thread takes only live_lock and a connection's own locks,
 *    never a link's (its doorbells try tx_lock, link/ctrl.c).
 *    After fork() the child re-initialises devs_lock and live_lock and
 *    never takes a connection's locks (its state is the parent's).
 */
#ifndef R2S_TRANSPORT_RDMA_H
#define R2S_TRANSPORT_RDMA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../verbs.h"

typedef struct r2s_rdma_dev_s r2s_rdma_dev_t;
typedef struct r2s_tp_state_s r2s_tp_state_t;

struct r2s_rdma_dev_s {
  struct ibv_context *ctx;
  struct ibv_comp_channel *chan; /* all receive CQs of this device */
  struct ibv_device_attr attr;
  char name[64];
  unsigned gen; /* r2s__rdma_fork_gen when opened */
  r2s_rdma_dev_t *next; /* devs_lock (rdma_dev.c): the devices open */
  /* live_lock (rdma_dev.c): a device that died (DEVICE_FATAL) is closed
   * once its progress thread stopped and its last connection is gone, so
   * that the kernel can finish removing it */
  int nstates;        /* references: port_for()'s, and its opener's, until dev_put() */
  int64_t idle_since; /* when nstates last fell to 0 */
  bool dead, thread_done;
};

typedef struct r2s_rdma_port_s {
  r2s_rdma_dev_t *dev;
  uint8_t port;
  int gid_index;
  union ibv_gid gid;
  uint16_t lid;
  enum ibv_mtu mtu;
  bool roce; /* link layer Ethernet: a GRH on every packet */
} r2s_rdma_port_t;

extern unsigned r2s__rdma_fork_gen;

int r2s__rdma_port_for(const struct sockaddr_storage *local, r2s_rdma_port_t *out);

void r2s__rdma_track(r2s_tp_state_t *st, r2s_rdma_dev_t *dev);
void r2s__rdma_untrack(r2s_tp_state_t *st);
void r2s__rdma_dev_put(r2s_rdma_dev_t *dev);

/* In rdma.c: one completion event of st's receive CQ (progress thread). */
void r2s__rdma_on_event(r2s_tp_state_t *st);
/* In rdma.c: the queue pair failed by the peer's doing, or the channel
 * under it was lost (the queue pair or the device died), progress
 * thread. */
void r2s__rdma_on_fatal(r2s_tp_state_t *st, const char *why);
void r2s__rdma_on_lost(r2s_tp_state_t *st, const char *why);
/* In rdma.c: once a second for every tracked state of the device
 * (progress thread): the liveness check of its queue pair. */
void r2s__rdma_on_tick(r2s_tp_state_t *st);
/* In rdma.c: at exit, waits (until deadline_ns) for st's posted sends. */
void r2s__rdma_drain(r2s_tp_state_t *st, uint64_t deadline_ns);

/* Calls fn on every tracked state of this process (at exit), with no
 * lock held: fn may wait, and may see a state twice. */
void r2s__rdma_for_each(void (*fn)(r2s_tp_state_t *, uint64_t), uint64_t arg);

#endif

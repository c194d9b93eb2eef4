/* The shared-memory transport: each end's receive ring lives in a POSIX
 * shared-memory segment it creates (mode 0600, a random name), the peer maps
 * it and becomes its producer, and the name is unlinked as soon as the peer
 * says it has mapped it. One copy in (put), one copy out (get).
 *
 * Reserving pages: tmpfs hands out a segment's pages on first touch, and a
 * touch that finds /dev/shm full is a SIGBUS, so no page is touched before
 * it is reserved. The owner reserves the control page and the first
 * FIRST_BACKED data bytes when it makes the ring; the producer reserves the
 * rest in steps (backed_step; MADV_POPULATE_WRITE, which fails
 * instead of raising SIGBUS) before its writes go past what is reserved.
 * A connection that moves less never pays for the rest: reserving and
 * freeing all 129 pages of both rings was most of what an upgrade cost a
 * short connection (0.55-0.68 against 0.07 ms on kernel TCP per
 * request/response connection; 0.30-0.36 ms with this, measured). A
 * producer that cannot reserve the next step says -ENOSPC from put once
 * the reserved part is full, and the link sends that direction back to
 * plain TCP (a PLAIN frame) after the bytes already in the ring. The
 * consumer reads past the part it knows reserved only after faulting in
 * the step that covers the tail (a producer that wrote there without
 * reserving broke the protocol). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cpu_busy.h"
#include "hostid.h"
#include "libc.h"
#include "log.h"
#include "options.h"
#include "proc.h"
#include "ring.h"
#include "sandbox.h"
#include "stats.h"
#include "transport.h"
#include "shm_fd.h"
#include "shm_offer.h"

struct r2s_tp_state_s {
  char name[R2S_SHM_NAME_MAX]; /* this end's segment, until sealed */
  bool named;
  void *own_mem, *peer_mem;
  size_t own_len, peer_len;
  r2s_ring_t own;  /* we consume */
  r2s_ring_t peer; /* we produce */
  bool attached;
  /* Data bytes, from the start, known reserved (see the top): of our own
   * ring (get, under the link's rx_lock), of the peer's (put, tx_lock). */
  uint64_t own_backed, peer_backed;
  /* Rings by descriptor (shm_fd.h): the socket on which we wait for the
   * peer's (-1: none), and whether ours went to the peer so, as which file. */
  int fetch_fd;
  ino_t fetch_ino;
  bool handed;
  dev_t handed_dev;
  ino_t handed_ino;
  /* The application's SO_SNDBUF as the kernel reports it (0: not set),
   * atomic: see tx_limit. */
  uint32_t sndbuf;
  bool wide; /* holds one of the process's wide rings (offer_size) */
  /* stop() was called (both link locks; read by put and space under
   * tx_lock, by peer_tx_closed without a lock) */
  bool stopped;
};

#define NAME_PREFIX "/r2s-"

/* Data bytes of a ring its owner reserves up front: a short connection's
 * request or response fits. */
#define FIRST_BACKED (64u * 1024)

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* How far the reserved part of a ring reaches once a stream got to byte
 * `end` of its first lap: FIRST_BACKED doubled up to STEP_MOST, then
 * STEP_MOST at a time, until it covers end, at most the ring (end 0: what
 * its owner reserves). The producer reserves in these steps, so a
 * consumer that sees a tail knows the step that covers it is reserved; a
 * connection that moves a little more than the first part maps no more
 * pages than it needs (reserving the whole rest at once made 200 KB
 * request/response connections 10 % slower than reserving it all up
 * front). A step is a stall of the writer's call: reserving 2 MiB of
 * tmpfs pages took 1.2 ms, 256 KiB 0.15 ms (measured), hence STEP_MOST.
 * A consumer that steps further than its producer (an older end, whose
 * steps kept doubling) reserves the rest itself (docs/protocol.md). */
#define STEP_MOST (256u * 1024)
static uint64_t backed_step(uint64_t end, uint64_t size)
{
  uint64_t b = FIRST_BACKED;
  while (b < end && b < size) b = b < STEP_MOST ? b << 1 : b + STEP_MOST;
  return b < size ? b : size;
}

/* Faults in (reserving where missing) the data bytes [from, to) of a
 * mapped ring: 0, -EINVAL when the kernel cannot (before 5.14), or
 * another -errno (no room in /dev/shm, no memory). */
static int populate(const r2s_ring_t *r, uint64_t from, uint64_t to, int advice)
{
  if (from >= to) return 0;
  return madvise(r->data + from, (size_t)(to - from), advice) == 0 ? 0 : -errno;
}

/* Rings larger than the usual auto size, for a process's first
 * SHM_WIDE_CONNS live rings, where /dev/shm has room for SHM_WIDE_ROOM
 * rings of SHM_RING_WIDE (the rest get the usual size):
 * - What a writer may queue unread. Kernel TCP lets a writer queue its
 *   send buffer, which the kernel tunes up to net.ipv4.tcp_wmem's largest
 *   (4 MiB by default), before it blocks; a program that writes that much
 *   before its peer reads (one thread driving both ends, a request larger
 *   than a 512 KiB ring, an echo server that reads before it writes back)
 *   works on TCP and, with a 512 KiB ring, hung under the shim. So a ring
 *   holds at least tcp_wmem's largest (rounded up to a power of two, at
 *   most SHM_RING_WIDE).
 * - The CPUs are contended (cpu_busy.h): then SHM_RING_WIDE. The ring is
 *   what a writer leaves for its reader between their turns on a CPU, and
 *   a 512 KiB ring made a stream a fraction of kernel TCP's speed once
 *   busy threads outnumbered the cores.
 * Pages are reserved as a stream reaches them (backed_step), so a large
 * ring costs a short or slow connection nothing more; a ring a stream has
 * gone round keeps all its pages, hence the cap on live ones. A
 * connection keeps its ring's size for life. */
#define SHM_RING_WIDE  (8ull << 20)
#define SHM_WIDE_CONNS 16u
#define SHM_WIDE_ROOM  32u
static unsigned wide_live;

/* net.ipv4.tcp_wmem's largest send buffer as a ring size: rounded up to
 * a power of two, at most SHM_RING_WIDE; 0 if it cannot be read. Read
 * once per process (a later change of the setting is not followed). */
static uint64_t tcp_send_max(void)
{
  static uint64_t cached = UINT64_MAX;
  uint64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v != UINT64_MAX) return v;
  unsigned long w[3]; /* min, default, max */
  v = 0;
  if (r2s__proc_numbers("/proc/sys/net/ipv4/tcp_wmem", w, 3) == 3 && w[2] > 0) {
    v = 4096;
    while (v < w[2] && v < SHM_RING_WIDE) v <<= 1;
  }
  __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  return v;
}

/* The ring this end offers: R2SOCK_RING_SIZE if set, else a large one
 * (see above) while one of the process's is free and the file system of
 * the segment (fd) has room, else the usual auto size. */
static uint64_t offer_size(int fd, bool *wide)
{
  *wide = false;
  if (r2s__opt.ring_size) return r2s__opt.ring_size;
  const uint64_t usual = r2s__ring_size(false);
  /* The cheap look first: with all large rings taken (a process of many
   * connections), an offer reads no /proc file. */
  struct statvfs vfs;
  if (__atomic_load_n(&wide_live, __ATOMIC_RELAXED) >= SHM_WIDE_CONNS || fstatvfs(fd, &vfs) != 0 ||
      (uint64_t)vfs.f_bavail * vfs.f_frsize < SHM_WIDE_ROOM * SHM_RING_WIDE)
    return usual;
  bool contended = r2s__cpus_contended();
  uint64_t size = contended ? SHM_RING_WIDE : tcp_send_max();
  if (size <= usual || !r2s__tp_slot_take(&wide_live, SHM_WIDE_CONNS)) return usual;
  *wide = true;
  if (contended) R2S_STAT_INC(rings_wide);
  return size;
}

static int random_name(char *out)
{
  uint8_t rnd[12];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return -EIO;
  char *p = out + sprintf(out, NAME_PREFIX "%d-", (int)getpid());
  for (size_t i = 0; i < sizeof rnd; i++) p += sprintf(p, "%02x", rnd[i]);
  return 0;
}

static void unmap(void **mem, size_t len)
{
  if (*mem) munmap(*mem, len);
  *mem = NULL;
}

/* Segments whose creator died before anyone unlinked them (killed between
 * creating its ring and the peer mapping it): their names carry the
 * creator's pid, so the first offer of each process sweeps them away. */
static void sweep_orphans(void)
{
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int pid;
    if (sscanf(e->d_name, "r2s-%d-", &pid) != 1 || pid <= 0 || pid == getpid()) continue;
    if (!r2s__proc_gone(pid)) continue;
    char name[R2S_SHM_NAME_MAX + 2];
    if (snprintf(name, sizeof name, "/%s", e->d_name) < (int)sizeof name) shm_unlink(name);
  }
  closedir(d);
}

/* This process spoke the protocol on a connection (r2s__shm_peer_may_offer)
 * or made a ring: a peer may have made a ring for it. */
static int used_shm;

void r2s__shm_peer_may_offer(void)
{
  if (!__atomic_load_n(&used_shm, __ATOMIC_RELAXED)) __atomic_store_n(&used_shm, 1, __ATOMIC_RELEASE);
}

void r2s__shm_exit(void)
{
  /* A peer killed between making its ring and our mapping it leaves the
   * name behind; the survivor is the one left to clean up, whether or not
   * it had made a ring of its own by then (a peer killed early, before
   * ours, left its own with no sweep: fault-kill-early saw it). Named
   * rings live only until their peer maps them, so the walk is short. */
  if (__atomic_load_n(&used_shm, __ATOMIC_ACQUIRE) && !r2s__sandboxed()) sweep_orphans();
}

static int shm_offer(r2s_tp_state_t **out, r2s_handshake_t *hs, const r2s_tp_conn_t *conn)
{
  (void)conn;
  static pthread_once_t swept = PTHREAD_ONCE_INIT;
  pthread_once(&swept, sweep_orphans);
  __atomic_store_n(&used_shm, 1, __ATOMIC_RELEASE);
  r2s_tp_state_t *st = calloc(1, sizeof *st);
  if (!st) return -ENOMEM;
  st->fetch_fd = -1;
  int rc = random_name(st->name);
  if (rc < 0) goto err_free;
  int fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = -errno;
    goto err_free;
  }
  st->named = true;
  uint64_t size = offer_size(fd, &st->wide);
  st->own_len = r2s__ring_bytes(size);
  /* Reserve the first pages, not just the size (see the top). Without
   * room for them the offer fails and the connection stays on TCP. */
  st->own_backed = backed_step(0, size);
  off_t first = (off_t)r2s__ring_bytes(st->own_backed);
  rc = ftruncate(fd, (off_t)st->own_len) < 0 ? errno : posix_fallocate(fd, 0, first);
  if (!rc) {
    st->own_mem = r2s__mmap_fd_raw(st->own_len, fd);
    if (st->own_mem == MAP_FAILED) rc = errno, st->own_mem = NULL;
  }
  /* A kernel that cannot populate (asked of the control page, reserved
   * already) lets no producer reserve the rest later: all of it now. */
  if (!rc && madvise(st->own_mem, R2S_RING_CTL_SIZE, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
    rc = posix_fallocate(fd, 0, (off_t)st->own_len);
    st->own_backed = size;
  }
  r2s__libc.close(fd);
  if (rc) {
    rc = -rc;
    goto err_unmap;
  }
  r2s__ring_format(st->own_mem, size);
  rc = r2s__ring_attach(&st->own, st->own_mem, size);
  if (rc < 0) goto err_unmap;
  r2s_offer_shm_t o = {.ring_size = size};
  memcpy(o.name, st->name, sizeof st->name);
  if ((rc = r2s__shm_offer_put(hs, &o)) < 0) goto err_unmap;
  hs->caps |= R2S_CAP_SHM_FD;
  *out = st;
  return 0;

err_unmap:
  unmap(&st->own_mem, st->own_len);
  shm_unlink(st->name);
  if (st->wide) r2s__tp_slot_give(&wide_live);
err_free:
  free(st);
  return rc;
}

/* Is the peer's address one of this host's (in our network namespace)?
 * Loopback is; otherwise the kernel tells: only a local address can be
 * bound. */
static bool peer_is_local(const struct sockaddr_storage *peer)
{
  if (peer->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) return true;
  } else if (peer->ss_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)peer)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127)) return true;
  } else {
    return false;
  }
  int s = r2s__libc.socket(peer->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return true; /* cannot tell: shared memory at least stays on this host */
  struct sockaddr_storage a = *peer;
  if (a.ss_family == AF_INET)
    ((struct sockaddr_in *)&a)->sin_port = 0;
  else
    ((struct sockaddr_in6 *)&a)->sin6_port = 0;
  socklen_t len = a.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  bool local = r2s__libc.bind(s, (struct sockaddr *)&a, len) == 0;
  r2s__libc.close(s);
  return local;
}

/* A peer on this host first; one elsewhere only when asked for by name
 * (the handshake then finds it unreachable). */
static int shm_rank(const r2s_tp_conn_t *conn)
{
  return peer_is_local(&conn->peer) ? 2 : 0;
}

static bool shm_reaches(const r2s_handshake_t *mine, const r2s_handshake_t *peer)
{
  r2s_offer_shm_t o;
  return r2s__shm_offer_get(peer, &o) == 1 && memcmp(mine->boot_id, peer->boot_id, 16) == 0 &&
         mine->netns == peer->netns;
}

static int shm_check(const r2s_handshake_t *peer)
{
  r2s_offer_shm_t o;
  return r2s__shm_offer_get(peer, &o) < 0 ? -EPROTO : 0;
}

/* The offer's size: a power of two from 4 KiB to 1 GiB. */
static bool size_ok(uint64_t size)
{
  return size >= 4096 && size <= (1ull << 30) && !(size & (size - 1));
}

/* The peer's ring, mapped at mem: we are its producer from now on. */
static int take_peer_ring(r2s_tp_state_t *st, void *mem, uint64_t size)
{
  st->peer_mem = mem;
  st->peer_len = r2s__ring_bytes(size);
  st->peer_backed = backed_step(0, size);
  int rc = r2s__ring_attach(&st->peer, mem, size);
  if (rc < 0) {
    unmap(&st->peer_mem, st->peer_len);
    return -EPROTO;
  }
  /* Release: a waiter's peer_shares_cpu reads st->peer without the
   * link's locks once it sees this (TSan saw the plain store race). */
  __atomic_store_n(&st->attached, true, __ATOMIC_RELEASE);
  return 0;
}

static int shm_attach(r2s_tp_state_t *st, const r2s_handshake_t *hs)
{
  r2s_offer_shm_t offer;
  const r2s_offer_shm_t *peer = &offer;
  if (r2s__shm_offer_get(hs, &offer) != 1) return -EPROTO;
  uint64_t size = peer->ring_size;
  if (strncmp(peer->name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0) return -EPROTO;
  if (!size_ok(size)) return -EPROTO;
  /* Our own ring, offered back to us, would make us our own producer: we
   * would read our own bytes as the peer's. */
  if (strncmp(peer->name, st->name, R2S_SHM_NAME_MAX) == 0) return -EPROTO;
  int fd = shm_open(peer->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return -errno;
  /* Only a segment made the way shm_offer makes them, by our own user: a
   * peer must not be able to point us at some other shared memory. */
  struct stat sb;
  int rc = 0;
  if (r2s__fstat_raw(fd, &sb) < 0)
    rc = -errno;
  else if (sb.st_uid != geteuid())
    rc = -EPERM; /* counted as another user's peer */
  else if ((sb.st_mode & 0777) != 0600 || (uint64_t)sb.st_size != r2s__ring_bytes(size))
    rc = -EPROTO; /* not a ring as shm_offer makes them */
  void *mem = rc ? MAP_FAILED : r2s__mmap_fd_raw(r2s__ring_bytes(size), fd);
  if (!rc && mem == MAP_FAILED) rc = -errno;
  r2s__libc.close(fd);
  if (rc) return rc;
  /* Both ends hold the ring now: the name has done its job. Unlinking it
   * here, not only when the owner hears of it, leaves nothing behind if
   * the owner dies first. */
  shm_unlink(peer->name);
  return take_peer_ring(st, mem, size);
}

static void shm_seal(r2s_tp_state_t *st)
{
  if (st->named) shm_unlink(st->name);
  st->named = false;
}

/* ---- rings by descriptor (shm_fd.h) ---- */

static int shm_fetch(r2s_tp_state_t *st, r2s_fetch_t *ask)
{
  if (st->fetch_fd >= 0) return -EALREADY;
  int fd = r2s__shm_fd_listen(ask, &st->fetch_ino);
  if (fd < 0) return fd;
  st->fetch_fd = fd;
  return 0;
}

/* Our ring moves into a sealed memfd before it goes: mapped over the same
 * addresses (MAP_FIXED replaces a mapping in one step), so the ring's
 * pointers stay valid for threads that look at its control page without
 * the link's locks. Nothing but that page was written yet: the peer, the
 * only producer, could not open the ring, and we read it only after its
 * RING frame. The named segment goes at once: nobody can open it. */
static int move_into_memfd(r2s_tp_state_t *st)
{
  int fd = r2s__shm_fd_ring(st->own_len, r2s__ring_bytes(st->own_backed));
  if (fd < 0) return fd;
  int rc = 0;
  void *tmp = r2s__mmap_fd_raw(R2S_RING_CTL_SIZE, fd);
  if (tmp == MAP_FAILED) {
    rc = -errno;
  } else {
    memcpy(tmp, st->own_mem, R2S_RING_CTL_SIZE);
    munmap(tmp, R2S_RING_CTL_SIZE);
    if (r2s__mmap_fd_over_raw(st->own_mem, st->own_len, fd) != st->own_mem) {
      rc = -errno;
      /* The kernel may have taken the old mapping away first: keep the
       * addresses mapped (zeroes) for the lockless readers. The ring is
       * lost; the peer hears that it did not come. */
      if (mmap(st->own_mem, st->own_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          MAP_FAILED)
        r2s__warn("could not keep a ring's addresses mapped (%s)", strerror(errno));
    }
  }
  struct stat sb;
  if (!rc && r2s__fstat_raw(fd, &sb) == 0) st->handed_dev = sb.st_dev, st->handed_ino = sb.st_ino;
  if (rc) {
    r2s__libc.close(fd);
    return rc;
  }
  shm_seal(st);
  return fd;
}

static int shm_hand_over(r2s_tp_state_t *st, const r2s_fetch_t *ask, uint8_t nonce[R2S_NONCE_LEN])
{
  if (st->handed) return -EALREADY;
  st->handed = true;
  int fd = move_into_memfd(st);
  if (fd < 0) return fd;
  int rc = r2s__shm_fd_send(ask, fd, nonce);
  r2s__libc.close(fd);
  return rc;
}

static int shm_fetched(r2s_tp_state_t *st, const r2s_handshake_t *peer, const uint8_t nonce[R2S_NONCE_LEN])
{
  if (st->fetch_fd < 0) return -EPROTO;
  int fd = nonce ? r2s__shm_fd_take(st->fetch_fd, st->fetch_ino, nonce) : -ECANCELED;
  r2s__shm_fd_unlisten(st->fetch_fd, st->fetch_ino);
  st->fetch_fd = -1;
  if (fd < 0) return fd;
  r2s_offer_shm_t offer;
  uint64_t size = r2s__shm_offer_get(peer, &offer) == 1 ? offer.ring_size : 0; /* 0: not size_ok */
  struct stat sb;
  int rc = size_ok(size) ? r2s__shm_fd_check(fd, r2s__ring_bytes(size)) : -EPROTO;
  /* Our own ring, handed back to us, would make us our own producer. */
  if (!rc && (r2s__fstat_raw(fd, &sb) < 0 || (st->handed && sb.st_dev == st->handed_dev && sb.st_ino == st->handed_ino)))
    rc = -EPROTO;
  void *mem = rc ? MAP_FAILED : r2s__mmap_fd_raw(r2s__ring_bytes(size), fd);
  if (!rc && mem == MAP_FAILED) rc = -errno;
  r2s__libc.close(fd);
  return rc ? rc : take_peer_ring(st, mem, size);
}

/* How many bytes we may have in the peer's ring unread: the ring, unless
 * the application sized its send buffer; then what TCP lets it have in
 * flight, its send buffer plus the reader's receive buffer (transport.h,
 * size_buffers). A send buffer the kernel tunes grows to megabytes, more
 * than a ring, so only one the application set bounds anything; a reader
 * that published nothing (an older end) leaves the ring as the bound. */
static uint64_t tx_limit(r2s_tp_state_t *st)
{
  uint64_t snd = __atomic_load_n(&st->sndbuf, __ATOMIC_RELAXED);
  uint64_t rcv = __atomic_load_n(&st->peer.ctl->consumer_rcvbuf, __ATOMIC_RELAXED);
  if (!snd || !rcv || snd + rcv >= st->peer.size) return st->peer.size;
  return snd + rcv;
}

/* Writable, as the kernel tells it for a TCP socket: once at least a third
 * of what we may have in flight is free (free >= queued / 2, tcp_poll's
 * rule), not at every byte the reader takes. A writer that outruns its
 * reader then waits for a stretch of room and fills it in one go, instead
 * of trading each KiB with the reader through the shared lines (and
 * waking for each). put() still writes whatever fits. */
static uint64_t writable_min(uint64_t limit)
{
  return limit / 3;
}

/* Room for our writes under the limit, from the ring's free bytes. */
static ssize_t room_under(uint64_t limit, uint64_t size, ssize_t free)
{
  if (free < 0) return free;
  uint64_t queued = size - (uint64_t)free;
  return queued >= limit ? 0 : (ssize_t)(limit - queued);
}

static ssize_t shm_space(r2s_tp_state_t *st)
{
  if (__atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE)) return 0;
  if (__atomic_load_n(&st->peer.ctl->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  uint64_t limit = tx_limit(st);
  ssize_t sp = room_under(limit, st->peer.size, r2s__ring_space(&st->peer));
  return sp >= 0 && (uint64_t)sp < writable_min(limit) ? 0 : sp;
}

/* Before our writes go past the reserved part of the peer's ring: the
 * next steps, reserved by us (see the top). Until the whole ring is, the
 * tail has not wrapped, so it is also the offset we write at. A kernel
 * without populate had the owner reserve it all. */
static ssize_t backed_room(r2s_tp_state_t *st, size_t want)
{
  if (st->peer_backed >= st->peer.size) return (ssize_t)want;
  uint64_t room = st->peer_backed - st->peer.tail;
  if (want <= room) return (ssize_t)want;
  uint64_t to = backed_step(st->peer.tail + want, st->peer.size);
  int rc = populate(&st->peer, st->peer_backed, to, MADV_POPULATE_WRITE);
  if (rc == -EINVAL) to = st->peer.size;
  if (rc == 0 || rc == -EINVAL) {
    st->peer_backed = to;
    return (ssize_t)(want < to - st->peer.tail ? want : to - st->peer.tail);
  }
  if (room) return (ssize_t)room; /* what still fits; the next put says so */
  r2s__warn("no room in /dev/shm for more of a ring (%s): the connection goes on over TCP",
            strerror(-rc));
  return -ENOSPC;
}

static ssize_t shm_put(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t skip, size_t max)
{
  if (__atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE)) return 0;
  if (__atomic_load_n(&st->peer.ctl->consumer_closed, __ATOMIC_ACQUIRE)) return -EPIPE;
  uint64_t limit = tx_limit(st);
  if (limit < st->peer.size) {
    ssize_t room = room_under(limit, st->peer.size, r2s__ring_space(&st->peer));
    if (room <= 0) return room;
    if ((size_t)room < max) max = (size_t)room;
  }
  ssize_t n = backed_room(st, max);
  return n < 0 ? n : r2s__ring_put(&st->peer, iov, cnt, skip, (size_t)n);
}

static ssize_t shm_avail(r2s_tp_state_t *st)
{
  return r2s__ring_avail(&st->own);
}

static uint64_t shm_filled_at(r2s_tp_state_t *st)
{
  return r2s__ring_filled_at(&st->own);
}

/* Before we read past the part of our ring known reserved: its producer
 * reserved the step that covers its tail before writing there, so the
 * pages are in (and are mapped here at once). One that is missing means
 * the producer skipped that: reading the page would allocate it, a
 * SIGBUS with /dev/shm full. */
static ssize_t shm_get(r2s_tp_state_t *st, const struct iovec *iov, int cnt, size_t max, bool peek)
{
  if (st->own_backed < st->own.size) {
    ssize_t avail = r2s__ring_avail(&st->own);
    if (avail < 0) return avail;
    uint64_t end = st->own.head + (uint64_t)avail;
    if (end > st->own_backed) {
      uint64_t to = backed_step(end, st->own.size);
      int rc = populate(&st->own, st->own_backed, to, MADV_POPULATE_READ);
      if (rc != 0 && rc != -EINVAL) return -EPROTO;
      st->own_backed = rc ? st->own.size : to;
    }
    if (max > st->own_backed - st->own.head) max = (size_t)(st->own_backed - st->own.head);
  }
  return r2s__ring_get(&st->own, iov, cnt, max, peek);
}

static uint64_t shm_produced(r2s_tp_state_t *st)
{
  return st->attached ? st->peer.tail : 0;
}

/* The head as the peer last published it; one beyond our tail (a broken
 * peer) counts as nothing unread. */
static uint64_t shm_unread(r2s_tp_state_t *st)
{
  if (!st->attached) return 0;
  uint64_t head = __atomic_load_n(&st->peer.ctl->head, __ATOMIC_ACQUIRE);
  return head - st->peer.head <= st->peer.tail - st->peer.head ? st->peer.tail - head : 0;
}

static uint64_t shm_consumed(r2s_tp_state_t *st)
{
  return st->own.head;
}

/* 1 + the CPU this thread runs on, for the *_woke_on hints (ring.h). */
static uint32_t this_cpu(void)
{
  int cpu = sched_getcpu();
  return cpu >= 0 ? (uint32_t)cpu + 1 : 0;
}

/* A sleeper woken from the CPU it now runs on has, most likely, just
 * preempted its waker there: the kernel runs a woken task at once, ahead
 * of the one that woke it. A writer preempted after a few KiB and a reader
 * that drains them and sleeps again then take turns a few KiB at a time
 * (80,000 switches a second at 1 KiB writes, measured). Giving the CPU back
 * lets the waker go on until it has to wait itself, so that each turn
 * moves up to a ring. Peers on different CPUs never yield. */
static void yield_to_waker(uint32_t *woke_on)
{
  uint32_t cpu = __atomic_load_n(woke_on, __ATOMIC_RELAXED);
  if (cpu && cpu == this_cpu()) sched_yield();
}

/* The sleeping words: set, then a full fence before the caller re-checks
 * the ring; the other side publishes its index, fences, then reads the
 * word. One of the two always sees the other (Dekker). */
static void shm_sleep_rx(r2s_tp_state_t *st, bool on)
{
  __atomic_store_n(&st->own.ctl->consumer_sleeping, on, __ATOMIC_SEQ_CST);
  if (!on) yield_to_waker(&st->own.ctl->producer_woke_on);
}

/* A sleeping producer's word holds the free bytes of the ring it waits for
 * (at least 1): the consumer rings only once that much is free. A peer
 * that writes just 1 (any room) or rings at any room on seeing a nonzero
 * word is served correctly too, only more often. Under a limit below the
 * ring, the bytes beyond it count as never free. */
static void shm_sleep_tx(r2s_tp_state_t *st, bool on)
{
  uint64_t limit = tx_limit(st), want = st->peer.size - limit + writable_min(limit);
  __atomic_store_n(&st->peer.ctl->producer_sleeping, on ? (uint32_t)(want ? want : 1) : 0, __ATOMIC_SEQ_CST);
  if (!on) yield_to_waker(&st->peer.ctl->consumer_woke_on);
}

/* No fence here: the put or get just before was a sequentially consistent
 * read-modify-write (ring.c), ordered before this load. */
static bool shm_take_peer_rx_sleeper(r2s_tp_state_t *st)
{
  uint32_t *w = &st->peer.ctl->consumer_sleeping;
  if (!__atomic_load_n(w, __ATOMIC_SEQ_CST) || !__atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST)) return false;
  __atomic_store_n(&st->peer.ctl->producer_woke_on, this_cpu(), __ATOMIC_RELAXED);
  return true;
}

/* The producer sleeps only after it saw too little room with its word set,
 * so its tail is still: the room counted from it here is the room it will
 * find. A bogus tail (a broken peer) just rings. */
static bool shm_take_peer_tx_sleeper(r2s_tp_state_t *st)
{
  uint32_t *w = &st->own.ctl->producer_sleeping;
  uint32_t want = __atomic_load_n(w, __ATOMIC_SEQ_CST);
  if (!want) return false;
  uint64_t queued = __atomic_load_n(&st->own.ctl->tail, __ATOMIC_ACQUIRE) - st->own.head;
  if (queued <= st->own.size && st->own.size - queued < want) return false;
  if (!__atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST)) return false;
  __atomic_store_n(&st->own.ctl->consumer_woke_on, this_cpu(), __ATOMIC_RELAXED);
  return true;
}

/* The peer's last wake-up of either of our directions came from this CPU. */
static bool shm_peer_shares_cpu(r2s_tp_state_t *st)
{
  uint32_t cpu = this_cpu();
  return cpu && (__atomic_load_n(&st->own.ctl->producer_woke_on, __ATOMIC_RELAXED) == cpu ||
                 (__atomic_load_n(&st->attached, __ATOMIC_ACQUIRE) &&
                  __atomic_load_n(&st->peer.ctl->consumer_woke_on, __ATOMIC_RELAXED) == cpu));
}

static void shm_size_buffers(r2s_tp_state_t *st, uint32_t sndbuf, uint32_t rcvbuf)
{
  __atomic_store_n(&st->sndbuf, sndbuf, __ATOMIC_RELAXED);
  __atomic_store_n(&st->own.ctl->consumer_rcvbuf, rcvbuf, __ATOMIC_RELAXED);
}

static bool shm_peer_tx_closed(r2s_tp_state_t *st)
{
  return !__atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE) &&
         __atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE) != 0;
}

/* Shared memory fails only with the connection; a link stops it when
 * told to fail over (R2SOCK_FAIL_AFTER). Our ring then ends at what we
 * read, so everything the peer resends past that is new to us (the
 * resend gets exercised), unless the peer closed its side: its FIN may
 * have followed, and no resend could, so the ring ends where the peer's
 * bytes did. */
static int shm_stop(r2s_tp_state_t *st, uint64_t *rx_end)
{
  if (!__atomic_load_n(&st->stopped, __ATOMIC_ACQUIRE)) {
    ssize_t avail = r2s__ring_avail(&st->own);
    if (avail < 0) return (int)avail;
    bool closed = __atomic_load_n(&st->own.ctl->producer_closed, __ATOMIC_ACQUIRE) != 0;
    if (r2s__ring_freeze(&st->own, closed ? st->own.tail : st->own.head) < 0) return -EPROTO;
    __atomic_store_n(&st->stopped, true, __ATOMIC_RELEASE);
  }
  *rx_end = st->own.tail;
  return 0;
}

static int shm_unacked(r2s_tp_state_t *st, uint64_t *from, struct iovec iov[2])
{
  *from = 0;
  if (!st->attached) return 0;
  if (r2s__ring_space(&st->peer) < 0) return -EPROTO;
  *from = st->peer.head;
  return r2s__ring_unacked(&st->peer, *from, iov);
}

static void shm_close_tx(r2s_tp_state_t *st)
{
  if (st->attached) __atomic_store_n(&st->peer.ctl->producer_closed, 1, __ATOMIC_RELEASE);
}

static void shm_close_rx(r2s_tp_state_t *st)
{
  __atomic_store_n(&st->own.ctl->consumer_closed, 1, __ATOMIC_RELEASE);
}

static void shm_flush(r2s_tp_state_t *st)
{
  (void)st; /* a put is in the peer's ring when it returns */
}

/* Local only: after fork() the connection may live on in another process,
 * so nothing shared is marked closed here; the peer learns that the
 * connection ended from TCP (FIN, or a reset), as the kernel decides. */
static void shm_release(r2s_tp_state_t *st)
{
  shm_seal(st);
  r2s__shm_fd_unlisten(st->fetch_fd, st->fetch_ino);
  unmap(&st->own_mem, st->own_len);
  unmap(&st->peer_mem, st->peer_len);
  if (st->wide) r2s__tp_slot_give(&wide_live);
  free(st);
}

const r2s_transport_t r2s__transport_shm = {
    .name = "shm",
    .path = R2S_PATH_SHM,
    .wake_sure = true,
    .rank = shm_rank,
    .offer = shm_offer,
    .check = shm_check,
    .reaches = shm_reaches,
    .attach = shm_attach,
    .seal = shm_seal,
    .fetch = shm_fetch,
    .hand_over = shm_hand_over,
    .fetched = shm_fetched,
    .space = shm_space,
    .put = shm_put,
    .avail = shm_avail,
    .filled_at = shm_filled_at,
    .get = shm_get,
    .unread = shm_unread,
    .produced = shm_produced,
    .consumed = shm_consumed,
    .size_buffers = shm_size_buffers,
    .sleep_rx = shm_sleep_rx,
    .sleep_tx = shm_sleep_tx,
    .take_peer_rx_sleeper = shm_take_peer_rx_sleeper,
    .take_peer_tx_sleeper = shm_take_peer_tx_sleeper,
    .peer_shares_cpu = shm_peer_shares_cpu,
    .stop = shm_stop,
    .unacked = shm_unacked,
    .peer_tx_closed = shm_peer_tx_closed,
    .close_tx = shm_close_tx,
    .close_rx = shm_close_rx,
    .flush = shm_flush,
    .release = shm_release,
};

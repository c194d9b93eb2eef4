/*
 * conn.h - the shim's state for one TCP socket.
 *
 * Contract:
 *  - One r2s_conn_t per kernel socket (open file description) the shim
 *    tracks: created by socket(), accept() or adoption of an inherited TCP
 *    socket; shared by every fd that dup() makes of it; ended when the last
 *    reference goes.
 *  - Reference counted: each fd-table slot holds one reference and each
 *    call in progress holds one. r2s__conn_put() of the last reference folds
 *    the connection's byte counts into the process stats, logs its one-line
 *    summary (LOG=info) and recycles the memory.
 *  - Memory is type-stable: a connection object is never returned to the
 *    system, only recycled as another connection. That is what lets the fd
 *    table hand out references without a lock (see fdtable.h): a reader that
 *    raced with the last put sees refs == 0 and backs off, never freed memory.
 *  - The path (TCP, SHM, RDMA) is chosen once, when the connection is
 *    established (r2s__conn_established), and the reason it stayed on TCP is
 *    counted there (the link decides, link.h; its reason is path.h's).
 *  - Functions return 0 or -errno and never touch errno.
 */
#ifndef R2S_CONN_H
#define R2S_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "path.h"
#include "statseg.h"

typedef enum {
  R2S_ROLE_SOCKET = 0, /* created, not yet connected or listening */
  R2S_ROLE_LISTENER,
  R2S_ROLE_CLIENT, /* connect() was called */
  R2S_ROLE_SERVER, /* returned by accept() */
} r2s_role_t;


/* flags */
#define R2S_CONN_NONBLOCK    0x1u  /* O_NONBLOCK on the open file description */
#define R2S_CONN_ESTABLISHED 0x2u  /* connected (or accepted) and decided */
#define R2S_CONN_CONNECTING  0x4u  /* nonblocking connect() in progress */
#define R2S_CONN_APP_OOB     0x10u /* the application uses urgent data: never upgrade */
#define R2S_CONN_OOBINLINE   0x20u /* ... and set SO_OOBINLINE */
#define R2S_CONN_FORKED      0x40u /* shared with another process since a fork() */
#define R2S_CONN_UNSEEN      0x80u /* inherited (fork child, exec): not in this account until it moves bytes */
#define R2S_CONN_SNDBUF      0x100u /* the application set SO_SNDBUF (link.h, r2s__link_sized_buffers) */
#define R2S_CONN_EPOLLED     0x200u /* added to an epoll set once (readiness.h, r2s__epoll_forget) */
#define R2S_CONN_FASTOPEN    0x400u /* TCP_FASTOPEN_CONNECT set before connect: never upgrade (conn.c) */
#define R2S_CONN_ZEROCOPY    0x800u /* SO_ZEROCOPY set: the kernel's send path (conn.c, link.h) */

/* addrs_known */
#define R2S_ADDR_LOCAL 0x1u
#define R2S_ADDR_PEER  0x2u

typedef struct r2s_conn_s r2s_conn_t;
typedef struct r2s_link_s r2s_link_t;
struct r2s_conn_s {
  uint32_t refs;                     /* atomic */
  uint32_t flags;                    /* atomic, R2S_CONN_* */
  uint32_t id;                       /* process-unique, for logs */
  int domain;                        /* AF_INET or AF_INET6 */
  int role;                          /* r2s_role_t, atomic */
  int path;                          /* r2s_path_t, atomic; fixed once established */
  int reason;                        /* r2s_reason_t, set with path */
  int fd_hint;                       /* an fd that referred to it, for logs */
  uint32_t nfds;                     /* atomic: fd-table slots pointing here */
  uint32_t rcvtimeo_ms, sndtimeo_ms; /* SO_RCVTIMEO / SO_SNDTIMEO, 0 = none */
  uint32_t wait_cap_ms;              /* atomic: stream.c's next sleep slice (0: the default) */
  uint32_t counted;                  /* atomic: its path/reason went into the stats */
  r2s_link_t *link;                  /* the upgrade protocol; NULL: plain TCP for good */
  /* Bytes moved per path, and sleeps; relaxed atomics, folded into the
   * stats at the end. ctr points to own, or to the connection's slot in the
   * stats segment (statseg.h) while it has one (stat_slot >= 0). */
  r2s_stat_ctr_t own;
  r2s_stat_ctr_t *ctr;               /* atomic */
  int stat_slot;                     /* statseg.c's */
  uint32_t stat_settled;             /* atomic: nothing left to republish on I/O */
  uint32_t stat_pub;                 /* statseg.c's: what was published */
  struct sockaddr_storage local, peer; /* filled when established, for logs */
  uint32_t addrs_known;                /* R2S_ADDR_*: already filled from a call the application made */
  uint16_t own_port;                   /* accepted: our port, the listener's (0: ask the kernel) */
  bool listen_exact;                   /* listener: its accepted sockets have its address (no IP_TRANSPARENT) */
  r2s_conn_t *live_prev, *live_next;   /* the pool's list of live objects */
};

/* True for the arguments of socket() that make a TCP socket. */
bool r2s__is_tcp(int domain, int type, int protocol);

/* The kernel's view of a socket the shim did not see being made
 * (inherited, or made before the shim was loaded): its domain if it is a
 * TCP socket, else -1. Three getsockopt calls. */
int r2s__fd_tcp_domain(int fd);

/* A new connection object with one reference, or NULL when out of memory
 * (the socket then simply goes untracked: plain TCP). */
r2s_conn_t *r2s__conn_new(int domain, r2s_role_t role, int fd);

static inline void r2s__conn_ref(r2s_conn_t *c)
{
  __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
}

/* Takes a reference unless the object is already on its way out (refs == 0). */
static inline bool r2s__conn_tryref(r2s_conn_t *c)
{
  uint32_t r = __atomic_load_n(&c->refs, __ATOMIC_RELAXED);
  do {
    if (r == 0) return false;
  } while (!__atomic_compare_exchange_n(&c->refs, &r, r + 1, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
  return true;
}

void r2s__conn_put(r2s_conn_t *c);

static inline uint32_t r2s__conn_flags(const r2s_conn_t *c)
{
  return __atomic_load_n(&c->flags, __ATOMIC_ACQUIRE);
}
static inline void r2s__conn_set_flag(r2s_conn_t *c, uint32_t f, bool on)
{
  if (on)
    __atomic_fetch_or(&c->flags, f, __ATOMIC_ACQ_REL);
  else
    __atomic_fetch_and(&c->flags, ~f, __ATOMIC_ACQ_REL);
}
/* True while the kernel alone serves this connection: no link, or a link
 * that settled on plain TCP both ways. The wrappers' fast test: two loads.
 * (The link's first member is its passthrough flag; link/internal.h asserts it.) */
static inline bool r2s__conn_passthrough(const r2s_conn_t *c)
{
  const int *l = (const int *)__atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  return !l || __atomic_load_n(l, __ATOMIC_ACQUIRE) != 0;
}

static inline r2s_path_t r2s__conn_path(const r2s_conn_t *c)
{
  return (r2s_path_t)__atomic_load_n(&c->path, __ATOMIC_ACQUIRE);
}
_Static_assert(R2S_PATH_COUNT == R2S_STATSEG_PATHS, "the stats segment counts bytes per path");
static inline r2s_stat_ctr_t *r2s__conn_ctr(r2s_conn_t *c)
{
  return __atomic_load_n(&c->ctr, __ATOMIC_RELAXED);
}
/* Until the path settles, a counted I/O may be the one that changed it. */
static inline void r2s__conn_stat_check(r2s_conn_t *c)
{
  if (__builtin_expect(!__atomic_load_n(&c->stat_settled, __ATOMIC_RELAXED), 0)) r2s__statseg_refresh(c);
}
static inline void r2s__conn_count_tx(r2s_conn_t *c, r2s_path_t p, long long n)
{
  if (n > 0) __atomic_fetch_add(&r2s__conn_ctr(c)->tx[p], (uint64_t)n, __ATOMIC_RELAXED);
  r2s__conn_stat_check(c);
}
static inline void r2s__conn_count_rx(r2s_conn_t *c, r2s_path_t p, long long n)
{
  if (n > 0) __atomic_fetch_add(&r2s__conn_ctr(c)->rx[p], (uint64_t)n, __ATOMIC_RELAXED);
  r2s__conn_stat_check(c);
}
/* A blocking call on c slept in the kernel. */
static inline void r2s__conn_count_wait(r2s_conn_t *c)
{
  __atomic_fetch_add(&r2s__conn_ctr(c)->waits, 1, __ATOMIC_RELAXED);
}

void r2s__conn_set_role(r2s_conn_t *c, r2s_role_t role);

/* The peer's address as the application named it to connect(), or as
 * accept() returned it (len: the bytes there): kept for the log line, the
 * stats segment and the skip list, so that they need no getpeername. An
 * address the kernel would name otherwise (the unspecified one, which
 * connects to loopback) is not kept. Before r2s__conn_established. */
void r2s__conn_note_peer(r2s_conn_t *c, const struct sockaddr *a, socklen_t len);

/* c was just accepted from listener l: our own address is the listener's,
 * where the listener is bound to one address and is not transparent
 * (IP_TRANSPARENT accepts connections to any address); our port is its port
 * unless it is transparent. Before r2s__conn_established. */
void r2s__conn_note_accepted(r2s_conn_t *c, const r2s_conn_t *l);

/* The socket fd of c is now connected (connect returned 0, a nonblocking
 * connect completed, or accept returned it): choose the path and count it.
 * Runs once per connection; later calls return at once. */
void r2s__conn_established(r2s_conn_t *c, int fd);

/* The application uses urgent data on c (MSG_OOB, SO_OOBINLINE,
 * SIOCATMARK): it is never upgraded, and a negotiation not yet switched
 * settles on plain TCP. */
void r2s__conn_app_oob(r2s_conn_t *c, int fd);

/* A nonblocking connect() is in progress on c; the wrappers call
 * r2s__conn_established when they see it complete. */
void r2s__conn_connecting(r2s_conn_t *c);

/* Folds the byte counts of every live connection into the process stats and
 * zeroes them (so nothing is counted twice), logging the summary line of
 * each at LOG=info: called at exit. */
void r2s__conn_fold_live(void);

/* A TCP socket the process had before the shim knew of it (inherited across
 * exec): tracked from now on and counted as adopted, and in conn_seen once
 * this process moves bytes on it (r2s__conn_take). untouched: no byte was
 * ever sent on it (tcphist.h), so no earlier image can have begun the
 * upgrade protocol, which starts here as on an accepted socket; otherwise
 * the connection stays on TCP (R2S_LINK_ADOPTED, link.h). */
void r2s__conn_adopted(r2s_conn_t *c, int fd, bool connected, bool untouched);

/* This process moves bytes on a connection it inherited (R2S_CONN_UNSEEN):
 * from now on its account owns the connection (conn_seen, and the path). */
void r2s__conn_take(r2s_conn_t *c);

/* The process is about to confine its system calls (sandbox.h): every
 * live connection's link settles on pass-through where it can
 * (r2s__link_sandbox). */
void r2s__conn_sandbox_all(void);

/* pthread_atfork handlers. In the child, inherited connections keep working,
 * but the bytes the parent moved are the parent's, so their counts restart
 * at zero. prepare takes pool_lock (a leaf: no lock of the shim is taken
 * under it, and it is held only briefly), so the child's live list is
 * whole; the child re-initialises the locks of every live link
 * (r2s__link_fork_child), which a thread of the parent may have held. */
void r2s__conn_fork_prepare(void);
void r2s__conn_fork_parent(void);
void r2s__conn_fork_child(void);

/* The pool lock itself, for the test that forks while another thread
 * holds it (tests/unit/hold_lock.c); the shim never calls it. */
pthread_mutex_t *r2s__conn_pool_lock(void);

/* Number of connection objects alive (for the tests and leak checks). */
unsigned r2s__conn_live_count(void);

/* Why c is on TCP now (NONE once upgraded). */
r2s_reason_t r2s__conn_reason(const r2s_conn_t *c);

const char *r2s__path_name(r2s_path_t p);
const char *r2s__reason_name(r2s_reason_t r);

#endif

/* Connection objects: a type-stable pool, reference counts, and the one
 * decision per connection of which path it takes. */
#include "conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "libc.h"
#include "link.h"
#include "log.h"
#include "options.h"
#include "rules.h"
#include "sandbox.h"
#include "sanitize.h"
#include "stats.h"

#define SLAB_OBJECTS 64

/* The pool lock guards the free list and the live list; it is taken only
 * when a connection is created or ends, never on the data path. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static r2s_conn_t *free_list; /* linked through live_next */
static r2s_conn_t *live_head;
static unsigned live_count;
static uint32_t next_id;

static const char *const path_names[R2S_PATH_COUNT] = {"tcp", "shm", "rdma"};
static const char *const reason_names[R2S_REASON_COUNT] = {
    "",       "disabled", "peer-plain", "no-peer-yet", "unfinished", "no-resources", "unreachable", "app-oob",
    "failed", "no-hello", "inherited",  "other-user",  "no-device",  "short",        "sandboxed",   "rule",
    "fastopen", "zerocopy"};
static const r2s_stat_id_t reason_stats[R2S_REASON_COUNT] = {
    R2S_STAT_COUNT,          R2S_STAT_tcp_disabled,     R2S_STAT_tcp_peer_plain,  R2S_STAT_tcp_no_peer_yet,
    R2S_STAT_tcp_unfinished, R2S_STAT_tcp_no_resources, R2S_STAT_tcp_unreachable, R2S_STAT_tcp_app_oob,
    R2S_STAT_tcp_failed,     R2S_STAT_tcp_no_hello,     R2S_STAT_COUNT,           R2S_STAT_tcp_other_user,
    R2S_STAT_tcp_no_device,  R2S_STAT_tcp_short,        R2S_STAT_COUNT,           R2S_STAT_tcp_rule,
    R2S_STAT_tcp_fastopen,   R2S_STAT_tcp_zerocopy};

const char *r2s__path_name(r2s_path_t p)
{
  return (unsigned)p < R2S_PATH_COUNT ? path_names[p] : "?";
}
const char *r2s__reason_name(r2s_reason_t r)
{
  return (unsigned)r < R2S_REASON_COUNT ? reason_names[r] : "?";
}

r2s_reason_t r2s__conn_reason(const r2s_conn_t *c)
{
  if (!c->link) return (r2s_reason_t)c->reason;
  int why;
  r2s__link_info(c->link, NULL, NULL, &why);
  return (r2s_reason_t)why;
}

static r2s_stat_id_t path_stat(r2s_path_t p)
{
  return p == R2S_PATH_RDMA ? R2S_STAT_conn_rdma : R2S_STAT_conn_shm;
}

/* Counts, once, which path an established connection ended up on: an
 * upgraded one was counted when it upgraded; the rest stayed on TCP, and
 * the reason says why. A connection shared by fork() or inherited across
 * exec belongs to the account of the process that moves bytes on it
 * (README, "process model"): one never used here was never counted here,
 * and a process that closes its copy without having moved a byte since the
 * fork hands the connection over, taking back what it had counted. */
static void classify(r2s_conn_t *c)
{
  uint32_t f = r2s__conn_flags(c);
  if (!(f & R2S_CONN_ESTABLISHED) || (f & R2S_CONN_UNSEEN)) return;
  if (f & R2S_CONN_FORKED) {
    r2s__stat_add(R2S_STAT_conn_seen, (uint64_t)-1);
    if (__atomic_exchange_n(&c->counted, 1, __ATOMIC_ACQ_REL) && r2s__conn_path(c) != R2S_PATH_TCP)
      r2s__stat_add(path_stat(r2s__conn_path(c)), (uint64_t)-1);
    return;
  }
  if (__atomic_exchange_n(&c->counted, 1, __ATOMIC_ACQ_REL)) return;
  if (r2s__conn_path(c) != R2S_PATH_TCP) return;
  R2S_STAT_INC(conn_tcp);
  r2s_reason_t why = r2s__conn_reason(c);
  if (why != R2S_REASON_NONE && why < R2S_REASON_COUNT && reason_stats[why] != R2S_STAT_COUNT)
    r2s__stat_add(reason_stats[why], 1);
}

bool r2s__is_tcp(int domain, int type, int protocol)
{
  return (domain == AF_INET || domain == AF_INET6) &&
         (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_STREAM &&
         (protocol == 0 || protocol == IPPROTO_TCP);
}

int r2s__fd_tcp_domain(int fd)
{
  int domain = r2s__sockopt_int(fd, SO_DOMAIN);
  return r2s__is_tcp(domain, r2s__sockopt_int(fd, SO_TYPE), r2s__sockopt_int(fd, SO_PROTOCOL)) ? domain : -1;
}

/* Refills the free list with one slab; pool_lock held. Slabs are never
 * unmapped: that is what keeps the objects type-stable. */
static int grow_pool(void)
{
  r2s_conn_t *slab =
      mmap(NULL, SLAB_OBJECTS * sizeof *slab, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (slab == MAP_FAILED) return -errno;
  R2S_LSAN_ROOT(slab, SLAB_OBJECTS * sizeof *slab); /* links hang off these objects */
  for (int i = SLAB_OBJECTS - 1; i >= 0; i--) {
    slab[i].live_next = free_list;
    free_list = &slab[i];
  }
  return 0;
}

r2s_conn_t *r2s__conn_new(int domain, r2s_role_t role, int fd)
{
  pthread_mutex_lock(&pool_lock);
  if (!free_list && grow_pool() < 0) {
    pthread_mutex_unlock(&pool_lock);
    r2s__warn("out of memory for connection state; fd %d stays plain TCP", fd);
    return NULL;
  }
  r2s_conn_t *c = free_list;
  free_list = c->live_next;
  /* refs is the only field a racing r2s__fd_get may touch: it is 0 here and
   * published as 1 last, after the rest is initialised. */
  memset((char *)c + sizeof c->refs, 0, sizeof *c - sizeof c->refs);
  c->id = ++next_id;
  c->domain = domain;
  c->role = role;
  c->fd_hint = fd;
  c->path = R2S_PATH_TCP;
  c->ctr = &c->own;
  c->stat_slot = -1;
  c->stat_settled = 1;
  c->live_next = live_head;
  if (live_head) live_head->live_prev = c;
  live_head = c;
  live_count++;
  pthread_mutex_unlock(&pool_lock);
  __atomic_store_n(&c->refs, 1, __ATOMIC_RELEASE);
  return c;
}

/* Moves the connection's byte counts into the process stats: those in its
 * own storage and, while it has a stats slot, those in the slot (a thread
 * that loaded c->ctr just before the slot was given may have added to own). */
static void fold_bytes(r2s_conn_t *c)
{
  static const r2s_stat_id_t tx_stat[R2S_PATH_COUNT] = {R2S_STAT_bytes_tcp_tx, R2S_STAT_bytes_shm_tx,
                                                        R2S_STAT_bytes_rdma_tx};
  static const r2s_stat_id_t rx_stat[R2S_PATH_COUNT] = {R2S_STAT_bytes_tcp_rx, R2S_STAT_bytes_shm_rx,
                                                        R2S_STAT_bytes_rdma_rx};
  r2s_stat_ctr_t *ctr[2] = {&c->own, r2s__conn_ctr(c)};
  for (int k = 0; k < (ctr[1] == ctr[0] ? 1 : 2); k++)
    for (int p = 0; p < R2S_PATH_COUNT; p++) {
      r2s__stat_add(tx_stat[p], __atomic_exchange_n(&ctr[k]->tx[p], 0, __ATOMIC_RELAXED));
      r2s__stat_add(rx_stat[p], __atomic_exchange_n(&ctr[k]->rx[p], 0, __ATOMIC_RELAXED));
    }
}

static const char *format_addr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
  char host[INET6_ADDRSTRLEN];
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    snprintf(buf, len, "%s:%u", host, ntohs(a->sin_port));
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    snprintf(buf, len, "[%s]:%u", host, ntohs(a->sin6_port));
  } else {
    snprintf(buf, len, "?");
  }
  return buf;
}

/* The one line per connection that LOG=info promises. */
static void log_summary(r2s_conn_t *c)
{
  static const char *const role_names[] = {"socket", "listener", "client", "server"};
  if (!(r2s__conn_flags(c) & R2S_CONN_ESTABLISHED)) return; /* never carried a stream */
  char l[64], p[64];
  r2s_path_t path = r2s__conn_path(c);
  uint64_t tx = 0, rx = 0;
  r2s_stat_ctr_t *ctr = r2s__conn_ctr(c);
  for (int i = 0; i < R2S_PATH_COUNT; i++) {
    tx += __atomic_load_n(&c->own.tx[i], __ATOMIC_RELAXED);
    rx += __atomic_load_n(&c->own.rx[i], __ATOMIC_RELAXED);
    if (ctr != &c->own) {
      tx += __atomic_load_n(&ctr->tx[i], __ATOMIC_RELAXED);
      rx += __atomic_load_n(&ctr->rx[i], __ATOMIC_RELAXED);
    }
  }
  r2s_reason_t why = path == R2S_PATH_TCP ? r2s__conn_reason(c) : R2S_REASON_NONE;
  r2s__info("conn %" PRIu32 " %s %s -> %s path=%s%s%s%s sent=%" PRIu64 " received=%" PRIu64, c->id,
            role_names[c->role & 3], format_addr(&c->local, l, sizeof l), format_addr(&c->peer, p, sizeof p),
            r2s__path_name(path), why ? " (" : "", r2s__reason_name(why), why ? ")" : "", tx, rx);
}

void r2s__conn_put(r2s_conn_t *c)
{
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  classify(c);
  if (r2s__log_level >= R2S_LOG_INFO) log_summary(c);
  fold_bytes(c);
  r2s__statseg_close(c);
  if (c->link) {
    r2s__link_free(c->link);
    c->link = NULL;
  }
  pthread_mutex_lock(&pool_lock);
  if (c->live_prev)
    c->live_prev->live_next = c->live_next;
  else
    live_head = c->live_next;
  if (c->live_next) c->live_next->live_prev = c->live_prev;
  live_count--;
  c->live_prev = NULL;
  c->live_next = free_list;
  free_list = c;
  pthread_mutex_unlock(&pool_lock);
}

void r2s__conn_connecting(r2s_conn_t *c)
{
  r2s__conn_set_flag(c, R2S_CONN_CONNECTING, true);
}

/* Addresses are for the log line and the stats segment, so they are
 * fetched only when one of them is on, and only those that the
 * application's own connect() or accept() did not already give
 * (r2s__conn_note_peer, r2s__conn_note_accepted). */
static void fill_addresses(r2s_conn_t *c, int fd)
{
  socklen_t len = sizeof c->local;
  if (!(c->addrs_known & R2S_ADDR_LOCAL) && r2s__libc.getsockname(fd, (struct sockaddr *)&c->local, &len) < 0)
    c->local.ss_family = 0;
  len = sizeof c->peer;
  if (!(c->addrs_known & R2S_ADDR_PEER) && r2s__libc.getpeername(fd, (struct sockaddr *)&c->peer, &len) < 0)
    c->peer.ss_family = 0;
}

/* An address of the connection's family, whole, that the kernel would
 * report as it is: not the unspecified one, which Linux connects to
 * loopback and then names so. */
static bool usable_addr(const r2s_conn_t *c, const struct sockaddr *a, socklen_t len)
{
  if (!a || a->sa_family != c->domain) return false;
  if (a->sa_family == AF_INET)
    return len >= sizeof(struct sockaddr_in) && ((const struct sockaddr_in *)a)->sin_addr.s_addr != htonl(INADDR_ANY);
  if (a->sa_family == AF_INET6) {
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return len >= sizeof(struct sockaddr_in6) && !IN6_IS_ADDR_UNSPECIFIED(v6) &&
           !(IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr32[3] == htonl(INADDR_ANY));
  }
  return false;
}

void r2s__conn_note_peer(r2s_conn_t *c, const struct sockaddr *a, socklen_t len)
{
  if (!usable_addr(c, a, len)) return;
  memset(&c->peer, 0, sizeof c->peer);
  memcpy(&c->peer, a, a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  c->addrs_known |= R2S_ADDR_PEER;
}

static unsigned port_of(const struct sockaddr_storage *a);

void r2s__conn_note_accepted(r2s_conn_t *c, const r2s_conn_t *l)
{
  if (!l->listen_exact) return;
  c->own_port = (uint16_t)port_of(&l->local);
  if (usable_addr(c, (const struct sockaddr *)&l->local, sizeof l->local)) {
    c->local = l->local;
    c->addrs_known |= R2S_ADDR_LOCAL;
  }
}

/* What a listener's accepted sockets inherit without a call: its address
 * (bound to one) and its port, unless it is transparent: IP_TRANSPARENT
 * lets it accept connections to addresses and ports not its own. Looked
 * at once, when it starts listening (the option is set before bind, for
 * the bind to a foreign address). A program that steers connections to
 * other ports to this listener through a socket-lookup BPF program is not
 * seen: its connections are named by the listener's port. */
static void note_listener(r2s_conn_t *c, int fd)
{
  socklen_t len = sizeof c->local;
  c->listen_exact = false;
  if (!(c->addrs_known & R2S_ADDR_LOCAL)) {
    if (r2s__libc.getsockname(fd, (struct sockaddr *)&c->local, &len) < 0) {
      c->local.ss_family = 0;
      return;
    }
    c->addrs_known |= R2S_ADDR_LOCAL;
  }
  int on = 0;
  len = sizeof on;
  if (r2s__libc.getsockopt(fd, SOL_IP, IP_TRANSPARENT, &on, &len) < 0 || on) return;
  if (c->domain == AF_INET6) {
    len = sizeof on;
    if (r2s__libc.getsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &on, &len) < 0 || on) return;
  }
  c->listen_exact = true;
}

/* The first direction of the connection moved into a ring. */
static void on_upgrade(void *arg, int path)
{
  r2s_conn_t *c = arg;
  __atomic_store_n(&c->path, path, __ATOMIC_RELEASE);
  r2s__statseg_refresh(c);
  /* Not yet this process's connection: r2s__conn_take() counts the path. */
  if (r2s__conn_flags(c) & R2S_CONN_UNSEEN) return;
  if (__atomic_exchange_n(&c->counted, 1, __ATOMIC_ACQ_REL) == 0) r2s__stat_add(path_stat((r2s_path_t)path), 1);
}

void r2s__conn_take(r2s_conn_t *c)
{
  if (!(__atomic_fetch_and(&c->flags, ~R2S_CONN_UNSEEN, __ATOMIC_ACQ_REL) & R2S_CONN_UNSEEN)) return;
  R2S_STAT_INC(conn_seen);
  r2s_path_t p = r2s__conn_path(c);
  if (p != R2S_PATH_TCP && __atomic_exchange_n(&c->counted, 1, __ATOMIC_ACQ_REL) == 0) r2s__stat_add(path_stat(p), 1);
}

static bool want_addresses(void)
{
  return r2s__log_level >= R2S_LOG_INFO || r2s__opt.statseg;
}

void r2s__conn_set_role(r2s_conn_t *c, r2s_role_t role)
{
  __atomic_store_n(&c->role, (int)role, __ATOMIC_RELEASE);
  if (role == R2S_ROLE_LISTENER && __atomic_load_n(&c->stat_slot, __ATOMIC_RELAXED) < 0) {
    note_listener(c, c->fd_hint);
    if (want_addresses()) fill_addresses(c, c->fd_hint);
    r2s__statseg_open(c);
  }
}

void r2s__conn_app_oob(r2s_conn_t *c, int fd)
{
  r2s__conn_set_flag(c, R2S_CONN_APP_OOB, true);
  r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
  if (l) r2s__link_app_oob(l, fd);
}

static unsigned port_of(const struct sockaddr_storage *a)
{
  if (a->ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)a)->sin_port);
  if (a->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
  return 0;
}

/* True if the connection's service port (the peer's for a client, ours for
 * a server) is in R2SOCK_SKIP_PORTS: its plain peers may read urgent data
 * inline, so it gets no hello. known: c's addresses were just filled in
 * (fill_addresses), so the port need not be asked for again; nor when
 * connect() named the peer or the listener told our port. */
static bool skipped_port(const r2s_conn_t *c, int fd, bool known)
{
  if (r2s__opt.skip_ports.n == 0) return false;
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  bool server = __atomic_load_n(&c->role, __ATOMIC_ACQUIRE) == R2S_ROLE_SERVER;
  unsigned port;
  if (server && c->own_port)
    port = c->own_port;
  else if (known || (c->addrs_known & (server ? R2S_ADDR_LOCAL : R2S_ADDR_PEER)))
    port = port_of(server ? &c->local : &c->peer);
  else if ((server ? r2s__libc.getsockname : r2s__libc.getpeername)(fd, (struct sockaddr *)&a, &len) < 0)
    return false;
  else
    port = port_of(&a);
  return port && r2s__ports_has(&r2s__opt.skip_ports, port);
}

/* This process's executable, by its file name as the kernel links
 * /proc/self/exe (a symbolic link's target counts, not argv[0]; "" without
 * /proc, as in a bare chroot, so that no name matches). Looked up once, at
 * the first connection that asks: the answer holds for this image (after
 * exec the shim starts again). */
static pthread_once_t program_once = PTHREAD_ONCE_INIT;
static char program[256];
static bool program_skipped;

static void find_program(void)
{
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
  /* A name this long is in no list (R2S_PROGRAM_NAME_MAX): left unknown. */
  if (strlen(name) >= sizeof program) return;
  memcpy(program, name, strlen(name) + 1);
  program_skipped = r2s__programs_has(&r2s__opt.skip_programs, program);
  if (program_skipped) r2s__info("%s is in R2SOCK_SKIP_PROGRAMS: its connections stay on TCP", program);
}

static const char *program_name(void)
{
  pthread_once(&program_once, find_program);
  return program;
}

/* True if this process's executable is in R2SOCK_SKIP_PROGRAMS: such a
 * program is known to use one connection from two processes at once
 * (options.h), which the protocol cannot follow, so its connections get no
 * hello and stay on TCP whatever the peer runs. */
static bool skipped_program(void)
{
  if (r2s__opt.skip_programs.n == 0) return false;
  program_name();
  return program_skipped;
}

/* The rules file's say on this connection (rules.h): the first rule that
 * matches sets *p's actions; NULL if none does. Only the facts the rules
 * ask about are looked up: the addresses (once, into c, as for the log),
 * the program (once per process), the effective uid (it may change). */
static const r2s_rule_t *rule_for(r2s_conn_t *c, int fd, bool *known, r2s_policy_t *p)
{
  r2s_rule_conn_t rc;
  memset(&rc, 0, sizeof rc);
  uint32_t keys = r2s__rules.keys;
  if (keys & R2S_RULE_PROGRAM) rc.program = program_name()[0] ? program : NULL;
  if (keys & R2S_RULE_ADDRESS_KEYS) {
    if (!*known) fill_addresses(c, fd);
    *known = true;
    rc.port = port_of(&c->peer);
    rc.lport = port_of(&c->local);
    r2s__rule_conn_peer(&rc, (const struct sockaddr *)&c->peer);
  }
  if (keys & R2S_RULE_USER) {
    rc.uid_known = true;
    rc.uid = (uint32_t)geteuid();
  }
  const r2s_rule_t *r = r2s__rules_decide(&r2s__rules, &rc, p);
  if (r)
    r2s__debug("conn %" PRIu32 " fd %d: the rule at %s:%" PRIu32 " applies", c->id, fd, r2s__rules.file,
               r->line);
  return r;
}

/* The upgrade protocol for a freshly established connection, if the policy
 * and the application's use of urgent data allow one. old: its flags;
 * inherited: a socket inherited across exec that no byte ever left (the
 * link begins the protocol only if it writes first, link.h). The skip
 * lists come first: they keep the programs and services the protocol
 * cannot serve off it, whatever a rule says. Then the first rule that
 * matches, then the options. */
static void start_link(r2s_conn_t *c, int fd, uint32_t old, bool known, bool inherited)
{
  if (old & R2S_CONN_OOBINLINE) {
    r2s_link_t *l =
        r2s__link_start(fd, &(r2s_link_how_t){.kind = R2S_LINK_OOBINLINE, .inherited = inherited});
    if (l) __atomic_store_n(&c->link, l, __ATOMIC_RELEASE);
    c->reason = R2S_REASON_APP_OOB;
    return;
  }
  if (r2s__sandboxed()) {
    c->reason = R2S_REASON_SANDBOXED; /* the protocol needs calls of ours (sandbox.h) */
    return;
  }
  /* With TCP_FASTOPEN_CONNECT, connect() sends nothing: the application's
   * first write goes out in the SYN, and a hello sent before it would ride
   * there too, where the kernel keeps no urgent pointer: the peer would
   * read our byte as the application's. */
  if (old & R2S_CONN_FASTOPEN) {
    c->reason = R2S_REASON_FASTOPEN;
    return;
  }
  /* SO_ZEROCOPY: MSG_ZEROCOPY sends are acknowledged on the socket's error
   * queue, which only the kernel's TCP fills. */
  if (old & R2S_CONN_ZEROCOPY) {
    c->reason = R2S_REASON_ZEROCOPY;
    return;
  }
  r2s_policy_t policy = r2s__policy_default();
  if (!r2s__upgrades_possible() || (old & R2S_CONN_APP_OOB) || skipped_program() || skipped_port(c, fd, known)) {
    c->reason = (old & R2S_CONN_APP_OOB) ? R2S_REASON_APP_OOB : R2S_REASON_DISABLED;
    return;
  }
  /* The one branch a process without rules pays. */
  if (r2s__rules.n && rule_for(c, fd, &known, &policy) && policy.upgrade.mode == R2S_UPGRADE_NEVER) {
    c->reason = R2S_REASON_RULE;
    return;
  }
  if (policy.upgrade.mode == R2S_UPGRADE_NEVER) { /* the file's default, and no rule allowed it */
    c->reason = R2S_REASON_DISABLED;
    return;
  }
  /* The hello goes out now, before any application byte can (an accepted
   * connection's once the client's has come). */
  bool accepted = __atomic_load_n(&c->role, __ATOMIC_ACQUIRE) == R2S_ROLE_SERVER;
  r2s_link_how_t how = {.kind = accepted ? R2S_LINK_ACCEPTED : R2S_LINK_CONNECTED,
                        .policy = &policy,
                        .inherited = inherited,
                        .on_upgrade = on_upgrade,
                        .arg = c};
  r2s_link_t *l = r2s__link_start(fd, &how);
  if (!l) {
    c->reason = R2S_REASON_NO_HELLO;
    return;
  }
  __atomic_store_n(&c->link, l, __ATOMIC_RELEASE);
  /* After the link is public: a setsockopt racing with this tells the link
   * itself, or left its flag for this. */
  if (r2s__conn_flags(c) & R2S_CONN_SNDBUF) r2s__link_sized_buffers(l, fd, true);
  r2s__debug("conn %" PRIu32 " fd %d established, hello sent", c->id, fd);
}

void r2s__conn_established(r2s_conn_t *c, int fd)
{
  uint32_t old = __atomic_fetch_or(&c->flags, R2S_CONN_ESTABLISHED, __ATOMIC_ACQ_REL);
  if (old & R2S_CONN_ESTABLISHED) return;
  r2s__conn_set_flag(c, R2S_CONN_CONNECTING, false);
  R2S_STAT_INC(conn_seen);
  bool known = want_addresses();
  if (known) fill_addresses(c, fd);
  start_link(c, fd, old, known, false);
  r2s__statseg_open(c);
}

void r2s__conn_adopted(r2s_conn_t *c, int fd, bool connected, bool untouched)
{
  bool listed = connected || c->role == R2S_ROLE_LISTENER;
  bool known = listed && want_addresses();
  if (known) fill_addresses(c, fd);
  if (connected && untouched) {
    /* No byte ever left on it, so no earlier image can have begun the
     * protocol (a peer switches only after our hello): it starts here as
     * on a socket just accepted, waiting for the peer's hello. Counted,
     * like any inherited connection, once this process moves bytes. */
    uint32_t old = __atomic_fetch_or(&c->flags, R2S_CONN_ESTABLISHED | R2S_CONN_UNSEEN, __ATOMIC_ACQ_REL);
    start_link(c, fd, old, known, true);
  } else if (connected) {
    __atomic_fetch_or(&c->flags, R2S_CONN_ESTABLISHED | R2S_CONN_UNSEEN, __ATOMIC_ACQ_REL);
    __atomic_store_n(&c->link, r2s__link_start(fd, &(r2s_link_how_t){.kind = R2S_LINK_ADOPTED}),
                     __ATOMIC_RELEASE);
  }
  if (listed) r2s__statseg_open(c);
  R2S_STAT_INC(sockets_adopted);
}

void r2s__conn_fold_live(void)
{
  pthread_mutex_lock(&pool_lock);
  for (r2s_conn_t *c = live_head; c; c = c->live_next) {
    /* Connections the app never closed still get their line. */
    classify(c);
    if (r2s__log_level >= R2S_LOG_INFO) log_summary(c);
    fold_bytes(c);
  }
  pthread_mutex_unlock(&pool_lock);
}

void r2s__conn_sandbox_all(void)
{
  pthread_mutex_lock(&pool_lock);
  for (r2s_conn_t *c = live_head; c; c = c->live_next) {
    r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
    if (l && !r2s__link_passthrough(l)) (void)r2s__link_sandbox(l);
  }
  pthread_mutex_unlock(&pool_lock);
}

/* fork() runs these around the copy (pthread_atfork), so the child never
 * inherits the pool lock held by a thread that does not exist there. */
void r2s__conn_fork_prepare(void)
{
  pthread_mutex_lock(&pool_lock);
  /* Every live connection is about to be shared by two processes: neither
   * may end it for the other (no drain, no background close). */
  for (r2s_conn_t *c = live_head; c; c = c->live_next) r2s__conn_set_flag(c, R2S_CONN_FORKED, true);
}

void r2s__conn_fork_parent(void)
{
  pthread_mutex_unlock(&pool_lock);
}

void r2s__conn_fork_child(void)
{
  pthread_mutex_unlock(&pool_lock);
  for (r2s_conn_t *c = live_head; c; c = c->live_next) {
    r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
    if (l) r2s__link_fork_child(l);
    /* In the child's account only once it moves bytes on them (classify). */
    if (r2s__conn_flags(c) & R2S_CONN_ESTABLISHED) r2s__conn_set_flag(c, R2S_CONN_UNSEEN, true);
    __atomic_store_n(&c->counted, 0, __ATOMIC_RELAXED);
    /* Its stats slot is in the parent's segment, which the child has
     * forgotten (r2s__statseg_fork_child ran first): the next counted I/O
     * publishes it in the child's own (r2s__statseg_refresh). Its byte
     * counts start from zero there. */
    memset(&c->own, 0, sizeof c->own);
    c->ctr = &c->own;
    __atomic_store_n(&c->stat_slot, -1, __ATOMIC_RELAXED);
    __atomic_store_n(&c->stat_settled, !r2s__opt.statseg || !(r2s__conn_flags(c) & R2S_CONN_ESTABLISHED),
                     __ATOMIC_RELAXED);
  }
}

pthread_mutex_t *r2s__conn_pool_lock(void)
{
  return &pool_lock;
}

unsigned r2s__conn_live_count(void)
{
  pthread_mutex_lock(&pool_lock);
  unsigned n = live_count;
  pthread_mutex_unlock(&pool_lock);
  return n;
}

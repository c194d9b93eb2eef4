/*
 * options.h - the one table of R2SOCK_* settings.
 *
 * Contract:
 *  - Every setting is one row of R2S_OPTIONS: environment name (without the
 *    R2SOCK_ prefix), field in r2s__opt, type, default and a one-line doc.
 *    Nothing else in the shim calls getenv.
 *  - r2s__options_load() runs once, at init, before any connection exists;
 *    afterwards r2s__opt is read-only and may be read without locks.
 *  - A value that does not parse warns once (naming the variable, the value
 *    and what is accepted) and keeps the default. An unknown R2SOCK_* name
 *  - With R2SOCK_VERBOSE=1 every option is printed with its value and origin,
 *    and R2SOCK_* names that are not options are listed (typos).
 *  - The rules file (conffile.h, R2SOCK_CONFIG) may set any option but
 *    CONFIG itself: r2s__options_load() reads the environment first and
 *    then the file, whose lines set only the options the environment left
 *    alone (the environment wins).
 */
#ifndef R2S_OPTIONS_H
#define R2S_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* When a connection may move off kernel TCP. AUTO is AFTER this many bytes:
 * more than a request and its response usually move, far less than TCP
 * moves in the time an upgrade costs, so request/response connections are
 * not slowed by rings they would never use and bulk ones still switch
 * early (docs/rdma.md, "Short connections"). */
#define R2S_UPGRADE_AUTO_BYTES (64u << 10)
typedef enum {
  R2S_UPGRADE_NEVER = 0,
  R2S_UPGRADE_NOW = 1,
  R2S_UPGRADE_AUTO = 2,
  R2S_UPGRADE_AFTER = 3
} r2s_upgrade_mode_t;
typedef struct r2s_opt_upgrade_s {
  r2s_upgrade_mode_t mode;
  uint64_t after_bytes; /* R2S_UPGRADE_AFTER: bytes moved over TCP first */
} r2s_opt_upgrade_t;

typedef int r2s_opt_level_t;
typedef bool r2s_opt_bool_t;
typedef const char *r2s_opt_string_t;
typedef const char *r2s_opt_path_t; /* NULL: the option's own default; "": none */
typedef uint64_t r2s_opt_ringsize_t;
typedef uint64_t r2s_opt_bytes_t; /* a size such as 1M; 0: off */
typedef uint64_t r2s_opt_memsize_t; /* a size such as 256M; 0: auto */
typedef unsigned r2s_opt_usec_t;
typedef unsigned r2s_opt_seconds_t; /* 0: the kernel's value (see the option) */
/* Which transport a connection to a peer shim offers. */
typedef enum { R2S_TRANSPORT_AUTO = 0, R2S_TRANSPORT_SHM = 1, R2S_TRANSPORT_RDMA = 2 } r2s_opt_transport_t;
typedef int r2s_opt_gidindex_t; /* -1: chosen from the connection's address */
/* A short list of TCP port ranges. */
#define R2S_PORTS_MAX 16
typedef struct r2s_opt_ports_s {
  unsigned n;
  struct {
    uint16_t lo, hi;
  } r[R2S_PORTS_MAX];
} r2s_opt_ports_t;
/* Services from before SO_OOBINLINE was off everywhere: FTP control,
 * telnet, rexec/rlogin/rsh, klogin/kshell and telnets, whose plain peers may
 * read urgent data inline and would see our hello byte as data; and rsync's
 * daemon, whose receiving side reads a connection in one process and
 * writes it in another (README, "fork": the protocol cannot be shared). */
#define R2S_SKIP_PORTS_DEFAULT                                                                               \
  ((r2s_opt_ports_t){6, {{21, 21}, {23, 23}, {512, 514}, {543, 544}, {873, 873}, {992, 992}}})
/* A short list of program names: executables' file names, as the kernel
 * links /proc/self/exe (a symbolic link's target counts, not argv[0];
 * without /proc, as in a bare chroot, no name matches). */
#define R2S_PROGRAMS_MAX     8
#define R2S_PROGRAM_NAME_MAX 32 /* bytes, with the terminating NUL */
typedef struct r2s_opt_programs_s {
  unsigned n;
  char name[R2S_PROGRAMS_MAX][R2S_PROGRAM_NAME_MAX];
} r2s_opt_programs_t;
/* rsync splits a connection between two processes (the side that receives
 * files reads it in one and writes it in another) on any port, which the
 * protocol cannot follow (README, "fork"): with the daemon on another port
 * than 873 both transfers stopped (a reset, or a hang to the end of the
 * client's timeout). git push over git:// does the same: git reads the
 * connection while the pack-objects it runs writes it; once git had
 * switched (R2SOCK_UPGRADE=now, or a ref advertisement past the auto
 * size) the push ended in a reset. One end that sends no hello keeps both
 * on TCP. */
#define R2S_SKIP_PROGRAMS_DEFAULT ((r2s_opt_programs_t){2, {"rsync", "git"}})

/* What a rule of the rules file may choose for one connection (rules.h);
 * a connection no rule matches gets the options' values. */
typedef struct r2s_policy_s {
  r2s_opt_upgrade_t upgrade;
  r2s_opt_transport_t transport;
} r2s_policy_t;

/* X(NAME, field, type, default, doc) */
#define R2S_OPTIONS(X)                                                                                       \
  X(LOG, log_level, level, 1,                                                                                \
    "messages on stderr: error, warn, info (one line per connection), debug; or 0-3")                        \
  X(VERBOSE, verbose, bool, false, "print every option at start-up and raise LOG to at least info")          \
  X(STATS, stats, bool, false, "print the counters on stderr when the process exits")                        \
  X(STATS_FILE, stats_file, string, NULL, "append the exit counters to this file instead (implies STATS)")   \
  X(STATSEG, statseg, bool, true, "publish live counters in /dev/shm/r2s-stat-PID for r2sock-stat")          \
  X(UPGRADE, upgrade, upgrade, ((r2s_opt_upgrade_t){R2S_UPGRADE_AUTO, R2S_UPGRADE_AUTO_BYTES}),              \
    "when to leave kernel TCP: never, now, auto (after 64K) or a size such as 1M (after that many bytes)")  \
  X(SKIP_PORTS, skip_ports, ports, R2S_SKIP_PORTS_DEFAULT,                                                  \
    "server ports whose connections never try to upgrade: a list such as 21,23,512-514, or none")           \
  X(SKIP_PROGRAMS, skip_programs, programs, R2S_SKIP_PROGRAMS_DEFAULT,                                       \
    "programs whose connections never try to upgrade (executable file names): a list such as rsync,app, "    \
    "or none")                                                                                               \
  X(PEER_SHIM, peer_shim, bool, false,                                                                       \
    "assume every peer runs r2sock: switch without waiting for its hello")                                   \
  X(RING_SIZE, ring_size, ringsize, 0,                                                                       \
    "bytes of each receive ring (a power of two, 4K to 1G); auto: shared memory as TCP's largest send "     \
    "buffer for a process's first 16 rings (8M while the CPUs are contended), 512K for the rest; RDMA 2M "  \
    "(8M for the first 8 where memlock is unlimited), less to fit RDMA_MEMORY")                             \
  X(SPIN_US, spin_us, usec, 20, "microseconds a blocked call polls shared memory before it sleeps (0-100000)") \
  X(SPIN_MAX_US, spin_max_us, usec, 1000,                                                                  \
    "microseconds an RDMA connection's blocked read may poll when its recent waits were that short "       \
    "(0-100000)")                                                                                            \
  X(LINGER, linger_s, seconds, 0,                                                                            \
    "seconds a closed connection waits for its peer once our bytes stop moving, also after exit "           \
    "(1-3600; 0: the kernel's tcp_fin_timeout)")                                                             \
  X(TRANSPORT, transport, transport, R2S_TRANSPORT_AUTO,                                                     \
    "auto (shared memory to a local peer, RDMA to a remote one), shm, or rdma (also to a local peer)")       \
  X(RDMA_MEMORY, rdma_memory, memsize, 0,                                                                  \
    "bytes a process may register for its RDMA connections' rings (auto: 256M, within three quarters of "  \
    "the memlock limit); under RING_SIZE=auto rings shrink to fit (to 64K), and a connection that finds no " \
    "room stays on TCP")                                                                                     \
  X(DEVICE, device, string, NULL, "the RDMA device to use (e.g. mlx5_0, rxe0) instead of the one that owns the address") \
  X(GID_INDEX, gid_index, gidindex, -1,                                                                      \
    "the GID table index to use instead of the one that matches the address")                                \
  X(FAIL_AFTER, fail_after, bytes, 0,                                                                      \
    "for tests: a connection's ring fails after it carried this many of our bytes (as when an RDMA link goes " \
    "down) and the connection goes on over TCP; 0: never")                                                    \
  X(CONFIG, config, path, NULL,                                                                              \
    "the rules file read at start-up: option defaults and per-connection rules (default /etc/r2sock.conf; "  \
    "empty: none)")

typedef struct r2s_options_s {
#define R2S_OPT_FIELD(NAME, field, type, def, doc) r2s_opt_##type##_t field;
  R2S_OPTIONS(R2S_OPT_FIELD)
#undef R2S_OPT_FIELD
} r2s_options_t;

extern r2s_options_t r2s__opt;

/* The options' indexes, for the rules file: R2S_OPT_<NAME>. */
typedef enum {
#define R2S_OPT_INDEX(NAME, field, type, def, doc) R2S_OPT_##NAME,
  R2S_OPTIONS(R2S_OPT_INDEX)
#undef R2S_OPT_INDEX
      R2S_OPT_COUNT
} r2s_opt_id_t;

/* Reads the environment, then the rules file, into r2s__opt (and the
 * file's rules into r2s__rules); warnings go to the log. */
void r2s__options_load(void);

/* One message about the rules file: line 0 for the file as a whole. */
typedef void r2s_conf_warn_t(void *arg, const char *file, unsigned line, const char *msg);
/* r2s__options_load for r2sock-rules: every message about the rules file
 * goes to warn (none to the log, none left out). Returns the file's bad
 * lines, -errno if it could not be read (a missing default file: 0), and
 * sets *file to the file read (NULL: none). */
int r2s__options_load_checked(r2s_conf_warn_t *warn, void *arg, const char **file);

/* The defaults the options give a connection that no rule matches. */
static inline r2s_policy_t r2s__policy_default(void)
{
  return (r2s_policy_t){r2s__opt.upgrade, r2s__opt.transport};
}

/* The option called name (len bytes, without R2SOCK_, any case), or -1. */
int r2s__option_find(const char *name, size_t len);
/* Its name, without R2SOCK_. */
const char *r2s__option_name(int id);
/* Parses value as option id into *o, as the environment's value would be:
 * true, or false with *accepted set to what the option accepts (*o is
 * then unchanged). A string replaces (and frees) the one *o had. */
bool r2s__option_parse(r2s_options_t *o, int id, const char *value, const char **accepted);
/* Frees the strings r2s__option_parse put in *o. */
void r2s__options_release(r2s_options_t *o);

/* Parsers, exposed for the unit tests: return true and set *out on success,
 * false (and leave *out alone) on a bad value. */
bool r2s__parse_bool(const char *s, bool *out);
bool r2s__parse_size(const char *s, uint64_t *out);
bool r2s__parse_level(const char *s, int *out);
bool r2s__parse_upgrade(const char *s, r2s_opt_upgrade_t *out);
bool r2s__parse_ringsize(const char *s, uint64_t *out);
bool r2s__parse_memsize(const char *s, uint64_t *out);
bool r2s__parse_usec(const char *s, unsigned *out);
bool r2s__parse_seconds(const char *s, unsigned *out);
bool r2s__parse_transport(const char *s, r2s_opt_transport_t *out);
bool r2s__parse_gidindex(const char *s, int *out);
bool r2s__parse_ports(const char *s, r2s_opt_ports_t *out);
bool r2s__parse_programs(const char *s, r2s_opt_programs_t *out);

/* True if port lies in one of the ranges. */
bool r2s__ports_has(const r2s_opt_ports_t *p, unsigned port);
/* True if name is one of the list's. */
bool r2s__programs_has(const r2s_opt_programs_t *p, const char *name);

/* Formats the value of one option for printing; returns buf. */
const char *r2s__format_upgrade(const r2s_opt_upgrade_t *v, char *buf, size_t len);
const char *r2s__format_ports(const r2s_opt_ports_t *v, char *buf, size_t len);
const char *r2s__format_programs(const r2s_opt_programs_t *v, char *buf, size_t len);
const char *r2s__format_transport(const r2s_opt_transport_t *v, char *buf, size_t len);

/* The ring size of a transport: R2SOCK_RING_SIZE, or when it is auto (0)
 * the transport's own. A ring between two cores needs little; an RDMA link
 * spans a network, and the bytes in flight are bounded by the ring (two
 * emulated hosts: iperf3 at 0.73-0.87x ib_write_bw with 512K, 0.94-1.14x
 * with 2M). Over RDMA both ends' rings are pinned memory; where that is
 * unlimited, the RDMA transport offers wider rings (transport/rdma_fit.h).
 * Shared memory offers wider ones while the CPUs are contended
 * (transport/shm.c, offer_size). */
#define R2S_RING_AUTO_SHM  (512u << 10)
#define R2S_RING_AUTO_RDMA (2u << 20)
static inline uint64_t r2s__ring_size(bool rdma)
{
  if (r2s__opt.ring_size) return r2s__opt.ring_size;
  return rdma ? R2S_RING_AUTO_RDMA : R2S_RING_AUTO_SHM;
}

#endif

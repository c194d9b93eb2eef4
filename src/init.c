/* Start-up, fork handlers and the exit report. */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conn.h"
#include "fdtable.h"
#include "libc.h"
#include "link.h"
#include "log.h"
#include "options.h"
#include "readiness.h"
#include "reaper.h"
#include "sandbox.h"
#include "stats.h"
#include "statseg.h"
#include "tcphist.h"
#include "transport.h"

int r2s__ready;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* Who started the shim, for the debug log (and the test that checks that a
 * call made before the shim's constructor starts it correctly). */
static const char *init_origin = "the first interposed call";

static void fork_prepare(void)
{
  r2s__conn_fork_prepare();
  r2s__statseg_fork_prepare();
  r2s__epoll_fork_prepare();
}
static void fork_parent(void)
{
  r2s__epoll_fork_done();
  r2s__statseg_fork_parent();
  r2s__conn_fork_parent();
  R2S_STAT_INC(forks);
}
static void fork_child(void)
{
  r2s__epoll_fork_child();
  r2s__statseg_fork_child();
  r2s__stats_reset(); /* the child's account starts empty */
  r2s__reaper_fork_child();
  r2s__conn_fork_child();
}

/* An inherited socket's first fd number, by inode. */
typedef struct adopted_s {
  dev_t dev;
  ino_t ino;
  int fd;
} adopted_t;

/* fd is a duplicate of a socket already adopted (an inetd-style server
 * hands its worker one socket as fds 0 and 1): it gets the same
 * connection, as dup() would have given it. */
static bool adopt_duplicate(const adopted_t *seen, size_t n, const struct stat *st, int fd)
{
  for (size_t i = 0; i < n; i++) {
    if (seen[i].dev != st->st_dev || seen[i].ino != st->st_ino) continue;
    r2s_conn_t *c = r2s__fd_get(seen[i].fd);
    if (c) {
      r2s__fd_install(fd, c);
      r2s__conn_put(c);
    }
    return true;
  }
  return false;
}

/* TCP sockets that came through exec (a forking server that execs its
 * worker, socket activation): track them like our own. One on which no
 * byte was ever sent (inetd and sshd hand over a socket just accepted)
 * may still upgrade; the others stay on TCP. */
static void adopt_inherited_sockets(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int self = dirfd(d);
  adopted_t *seen = NULL;
  size_t n = 0, cap = 0;
  bool full = false;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end != '\0' || e->d_name[0] == '\0' || fd == self || fd < 0) continue;
    struct stat st;
    if (fstat((int)fd, &st) < 0 || !S_ISSOCK(st.st_mode)) continue;
    if (adopt_duplicate(seen, n, &st, (int)fd)) continue;
    int domain = r2s__fd_tcp_domain((int)fd);
    if (domain < 0) continue;
    bool listening = r2s__sockopt_int((int)fd, SO_ACCEPTCONN) == 1;
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    bool connected = !listening && r2s__libc.getpeername((int)fd, (struct sockaddr *)&peer, &plen) == 0;
    r2s_conn_t *c = r2s__conn_new(domain, listening ? R2S_ROLE_LISTENER : R2S_ROLE_SERVER, (int)fd);
    if (!c) break;
    int fl = r2s__libc.fcntl((int)fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) r2s__conn_set_flag(c, R2S_CONN_NONBLOCK, true);
    if (n == cap && !full) {
      size_t ncap = cap ? 2 * cap : 16;
      adopted_t *more = realloc(seen, ncap * sizeof *more);
      if (more) {
        seen = more;
        cap = ncap;
      } else {
        /* Duplicates found later get states of their own, so from here on
         * only links that never send or switch (R2S_LINK_ADOPTED, link.h). */
        full = true;
      }
    }
    /* Urgent bytes read inline (the earlier image's setting) would have
     * put the peer's hello in the stream already. */
    bool untouched =
        connected && !full && r2s__sockopt_int((int)fd, SO_OOBINLINE) == 0 && r2s__tcp_never_sent((int)fd);
    r2s__conn_adopted(c, (int)fd, connected, untouched);
    r2s__fd_install((int)fd, c);
    r2s__conn_put(c);
    r2s__debug("adopted inherited TCP socket fd %ld (%s)", fd,
               listening   ? "listener"
               : untouched ? "stream, nothing sent yet"
                           : "stream");
    if (!full) seen[n++] = (adopted_t){st.st_dev, st.st_ino, (int)fd};
  }
  free(seen);
  closedir(d);
}

static void run_init(void)
{
  r2s__options_load();
  r2s__statseg_init();
  if (r2s__fdtable_init() == 0) {
    int rc = pthread_atfork(fork_prepare, fork_parent, fork_child);
    if (rc != 0) r2s__warn("pthread_atfork failed (%d): fork() children may see stale state", rc);
    adopt_inherited_sockets();
  }
  r2s__debug("ready (started by %s): fd table for %u fds", init_origin, r2s__fd_cap);
  __atomic_store_n(&r2s__ready, 1, __ATOMIC_RELEASE);
}

void r2s__init_slow(void)
{
  if (r2s__in_shim) return; /* re-entered from our own start-up: pass through */
  r2s__in_shim++;
  if (!__atomic_load_n(&r2s__libc.read, __ATOMIC_ACQUIRE)) r2s__libc_load();
  pthread_once(&init_once, run_init);
  r2s__in_shim--;
}

__attribute__((constructor)) static void r2s_constructor(void)
{
  if (!__atomic_load_n(&r2s__ready, __ATOMIC_ACQUIRE)) init_origin = "its constructor";
  r2s__ensure_init();
}

/* The exit report. A destructor, not atexit(): it runs after the
 * application's own atexit handlers, which may still move bytes. */
__attribute__((destructor)) static void r2s_destructor(void)
{
  if (!__atomic_load_n(&r2s__ready, __ATOMIC_ACQUIRE)) return;
  r2s__rdma_exit(1000);
  r2s__link_failover_exit(1000);
  /* Most peers end at about the time we do; a peer that reads late gets a
   * lingerer instead of a wait (exit used to wait 1 s and then let late
   * frames reset the connection). */
  r2s__reaper_exit(100);
  r2s__shm_exit();
  r2s__statseg_exit();
  if (r2s__opt.stats || r2s__log_level >= R2S_LOG_INFO) r2s__conn_fold_live();
  if (!r2s__opt.stats) return;
  r2s_stats_t s;
  r2s__stats_snapshot(&s);
  /* A process that never touched a TCP socket (a shell, a compiler run under
   * the preload) has nothing to report. */
  uint64_t any = 0;
  for (int i = 0; i < R2S_STAT_COUNT; i++) any |= s.v[i];
  if (!any) return;
  char line[2048];
  size_t n = r2s__stats_format(&s, line, sizeof line);
  int fd = 2;
  /* A sandboxed process (sandbox.h) may not open the file, nor write on
   * the application's stderr (see log.c): its counters are not reported. */
  if (r2s__sandboxed()) return;
  if (r2s__opt.stats_file) {
    fd = r2s__open_raw(r2s__opt.stats_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      r2s__warn("cannot open R2SOCK_STATS_FILE %s: %s; printing on stderr", r2s__opt.stats_file,
                strerror(errno));
      fd = 2;
    }
  }
  (void)r2s__write_all(fd, line, n);
  if (fd != 2) r2s__libc.close(fd);
  free((void *)r2s__opt.stats_file); /* the process is ending: the copy has served */
  r2s__opt.stats_file = NULL;
}

/* Start-up, fork handlers and the exit report. */
#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adopt.h"
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

static void run_init(void)
{
  r2s__options_load();
  r2s__statseg_init();
  if (r2s__fdtable_init() == 0) {
    int rc = pthread_atfork(fork_prepare, fork_parent, fork_child);
    if (rc != 0) r2s__warn("pthread_atfork failed (%d): fork() children may see stale state", rc);
    r2s__adopt_inherited();
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

/* The per-epoll-fd registry of the application's registrations, its
 * wake-up socket, and the forget and fork handlers (epoll_shadow.h). */
#include "epoll_shadow.h"
#include "epoll_index.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "clock.h"
#include "fdtable.h"
#include "libc.h"
#include "link.h"
#include "poke.h"
#include "readiness.h"
#include "sanitize.h"

/* One slot per possible epoll fd, reserved like the fd table. */
static r2s_ep_reg_t **regs;
static pthread_once_t regs_once = PTHREAD_ONCE_INIT;

/* The epoll fds that have a registry, for r2s__epoll_forget (a process has
 * few). sets_lock also keeps a registry from being freed while forget
 * looks at it. Lock order: sets_lock, then a registry's lock. */
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static int *sets;
static unsigned nsets, sets_cap;

/* fork() copies the list whole: never in the middle of a change. */
void r2s__epoll_fork_prepare(void)
{
  pthread_mutex_lock(&sets_lock);
}
void r2s__epoll_fork_done(void)
{
  pthread_mutex_unlock(&sets_lock);
}

/* In the child, a registry's lock may have been held by a thread that is
 * not there: every registry on the list (consistent: sets_lock was held
 * across the fork) gets a fresh one, and its index is relinked from the
 * entries, which that thread may have left half linked. */
void r2s__epoll_fork_child(void)
{
  for (unsigned k = 0; regs && k < nsets; k++) {
    r2s_ep_reg_t *r = __atomic_load_n(&regs[sets[k]], __ATOMIC_ACQUIRE);
    if (!r) continue;
    pthread_mutex_init(&r->lock, NULL);
    r2s__ep_reindex(r);
  }
  pthread_mutex_unlock(&sets_lock);
}

static void sets_add(int epfd)
{
  pthread_mutex_lock(&sets_lock);
  if (nsets == sets_cap) {
    unsigned cap = sets_cap ? sets_cap * 2 : 8;
    int *v = realloc(sets, cap * sizeof *v);
    if (v) sets = v, sets_cap = cap;
  }
  /* Out of memory: the set is not looked at by forget, as before it. */
  if (nsets < sets_cap) sets[nsets++] = epfd;
  pthread_mutex_unlock(&sets_lock);
}

static void regs_init(void)
{
  size_t len = (size_t)r2s__fd_cap * sizeof *regs;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  __atomic_store_n(&regs, p == MAP_FAILED ? NULL : (r2s_ep_reg_t **)p, __ATOMIC_RELEASE);
  if (regs) R2S_LSAN_ROOT(p, len);
}

r2s_ep_reg_t *r2s__epoll_reg(int epfd, bool create)
{
  pthread_once(&regs_once, regs_init);
  if (!regs || epfd < 0 || (unsigned)epfd >= r2s__fd_cap) return NULL;
  r2s_ep_reg_t *r = __atomic_load_n(&regs[epfd], __ATOMIC_ACQUIRE);
  if (r || !create) return r;
  r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->lock, NULL);
  r->wake.rd = r->wake.wr = -1;
  r2s_ep_reg_t *expected = NULL;
  if (!__atomic_compare_exchange_n(&regs[epfd], &expected, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    free(r);
    r = expected;
  } else {
    sets_add(epfd);
  }
  return r;
}

/* ---- the set's wake-up (r2s_ep_wake_t) ---- */

static void wake_close(r2s_ep_reg_t *r)
{
  r2s_ep_wake_t *w = &r->wake;
  r->poke = 0; /* looked at again by the next wait (r2s__epoll_join_poke) */
  /* A number the application took back (closefrom, then a file of its
   * own) is no longer ours: forgotten, never closed. */
  if (w->rd >= 0 && r2s__still_sock(w->rd, w->rd_ino)) r2s__libc.close(w->rd);
  if (w->wr >= 0 && r2s__still_sock(w->wr, w->wr_ino)) r2s__libc.close(w->wr);
  w->rd = w->wr = -1;
}

/* The set's wake-up, made and registered in epfd on first use; false if
 * it cannot be had (the wait then ends with its slice). r->lock held. */
static bool wake_ready(r2s_ep_reg_t *r, int epfd)
{
  r2s_ep_wake_t *w = &r->wake;
  if (w->rd >= 0 && r2s__still_sock(w->rd, w->rd_ino) && r2s__still_sock(w->wr, w->wr_ino)) return true;
  wake_close(r);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) return false;
  /* Kept at numbers of the shim's (libc.h); the originals go. */
  int wr = r2s__keep_fd(sv[1], &w->wr_ino), rd = r2s__keep_fd(sv[0], &w->rd_ino);
  r2s__libc.close(sv[0]);
  r2s__libc.close(sv[1]);
  /* The key outlives a wake-up made anew: the poke stays registered
   * under it (r2s__epoll_join_poke). */
  uint64_t key = w->key;
  if (!key && getrandom(&key, sizeof key, GRND_NONBLOCK) != (ssize_t)sizeof key)
    key = (uint64_t)r2s__now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)r;
  if (!key) key = 1; /* 0 means none yet */
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key};
  if (rd < 0 || wr < 0 || r2s__libc.epoll_ctl(epfd, EPOLL_CTL_ADD, rd, &ev) < 0) {
    if (rd >= 0) r2s__libc.close(rd);
    if (wr >= 0) r2s__libc.close(wr);
    return false;
  }
  w->rd = rd, w->wr = wr, w->key = key;
  return true;
}

/* Wakes the threads asleep on epfd: they look at the carried connections
 * again. A nonblocking send: it never waits under r->lock. */
static void wake_waiters(r2s_ep_reg_t *r, int epfd)
{
  pthread_mutex_lock(&r->lock);
  if (wake_ready(r, epfd)) {
    char b = 1;
    (void)r2s__libc.send(r->wake.wr, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  pthread_mutex_unlock(&r->lock);
}

bool r2s__epoll_join_poke(r2s_ep_reg_t *r, int epfd)
{
  /* Once joined, no system call: each wait of the set comes here. */
  if (r->poke && r->poke == r2s__poke_id() && r->wake.rd >= 0) return true;
  return wake_ready(r, epfd) && r2s__poke_join(epfd, r->wake.key, &r->poke);
}

bool r2s__epoll_is_wake(r2s_ep_reg_t *r, const struct epoll_event *ev)
{
  if (!r->wake.key || ev->data.u64 != r->wake.key) return false;
  char buf[64];
  if (r->wake.rd >= 0 && r2s__still_sock(r->wake.rd, r->wake.rd_ino))
    while (r2s__libc.recv(r->wake.rd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
  return true;
}

int r2s__epoll_drop_wakes(r2s_ep_reg_t *r, struct epoll_event *ev, int n)
{
  int out = 0;
  pthread_mutex_lock(&r->lock);
  for (int j = 0; j < n; j++)
    if (!r2s__epoll_is_wake(r, &ev[j])) ev[out++] = ev[j];
  pthread_mutex_unlock(&r->lock);
  return out;
}

void r2s__epoll_closed(int fd)
{
  if (!__atomic_load_n(&regs, __ATOMIC_ACQUIRE) || fd < 0 || (unsigned)fd >= r2s__fd_cap ||
      !__atomic_load_n(&regs[fd], __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&sets_lock);
  r2s_ep_reg_t *r = __atomic_exchange_n(&regs[fd], NULL, __ATOMIC_ACQ_REL);
  for (unsigned i = 0; r && i < nsets; i++)
    if (sets[i] == fd) sets[i--] = sets[--nsets];
  pthread_mutex_unlock(&sets_lock);
  if (!r) return;
  /* A wait still running on this epoll fd in another thread would be the
   * application's own use-after-close; the registry goes with the fd. */
  wake_close(r);
  pthread_mutex_destroy(&r->lock);
  r2s__ep_clear(r);
  free(r);
}

/* The kernel drops a socket from the epoll sets it is in once its last
 * descriptor closes, and an application that closes without
 * EPOLL_CTL_DEL (haproxy) relies on that. A carried connection's socket
 * outlives the application's close in a descriptor of the shim's (the
 * reaper's, an RDMA transport's), and with it the registrations: its
 * events (the peer's end, above all) would be reported under the old
 * number, to whatever connection the application has there now. So the
 * application's last close of a connection takes it out of every set the
 * shim saw it added to, first. */
void r2s__epoll_forget(int fd, r2s_conn_t *c)
{
  if (!(r2s__conn_flags(c) & R2S_CONN_EPOLLED)) return;
  pthread_mutex_lock(&sets_lock);
  for (unsigned k = 0; k < nsets; k++) {
    r2s_ep_reg_t *r = __atomic_load_n(&regs[sets[k]], __ATOMIC_ACQUIRE);
    if (!r) continue;
    pthread_mutex_lock(&r->lock);
    r2s_ep_entry_t *e = r2s__ep_find_fd(r, fd);
    if (e && r2s__ep_same_conn(e, c)) {
      (void)r2s__libc.epoll_ctl(sets[k], EPOLL_CTL_DEL, fd, NULL);
      r2s__ep_remove(r, e);
    }
    pthread_mutex_unlock(&r->lock);
  }
  pthread_mutex_unlock(&sets_lock);
}

void r2s__epoll_created(int epfd)
{
  /* A new epoll fd may reuse the number of a closed one: forget it. */
  r2s_ep_reg_t *r = r2s__epoll_reg(epfd, false);
  if (!r) return;
  pthread_mutex_lock(&r->lock);
  r2s__ep_clear(r);
  wake_close(r); /* registered in the old set, not in this one */
  pthread_mutex_unlock(&r->lock);
}

void r2s__epoll_ctl_shadow(int epfd, int op, int fd, const struct epoll_event *ev)
{
  r2s_conn_t *c = r2s__fd_get(fd);
  r2s_ep_reg_t *r = r2s__epoll_reg(epfd, c != NULL && op == EPOLL_CTL_ADD);
  if (r) {
    pthread_mutex_lock(&r->lock);
    r2s_ep_entry_t *e = r2s__ep_find_fd(r, fd);
    if (op == EPOLL_CTL_DEL) {
      if (e) r2s__ep_remove(r, e);
    } else if (c && ev && (e || op == EPOLL_CTL_ADD)) {
      /* ADD over an entry left by a socket the kernel dropped from the
       * set (closed) renews it, as MOD does. */
      r2s_ep_entry_t now = {.fd = fd,
                            .events = ev->events,
                            .data = ev->data.u64,
                            .conn = c,
                            .conn_id = c->id,
                            .busy_ns = r2s__now_ns()};
      if (e)
        r2s__ep_set(r, e, &now);
      else
        e = r2s__ep_add(r, &now); /* NULL, out of memory: the kernel's answer stands for it */
      if (e) {
        r2s__conn_set_flag(c, R2S_CONN_EPOLLED, true);
        /* The waits' list of active links learns of it now (epoll_wait.c):
         * a set whose list stands looks at no other entry. */
        if (!r2s__conn_passthrough(c)) {
          r->carried = true;
          r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
          /* What it is registered for may be more than a quiet link
           * answers for (link.h): it is looked at again. */
          if (l) r2s__link_unquiet(l);
          if (l && r2s__link_active(l)) (void)r2s__ep_act_add(r, e);
        }
      }
    }
    pthread_mutex_unlock(&r->lock);
  }
  /* A waiter must look at the connection again where the link, not the
   * kernel, answers for it (see r2s_ep_wake_t). */
  if (r && c && ev && op != EPOLL_CTL_DEL && !r2s__conn_passthrough(c) &&
      __atomic_load_n(&r->waiters, __ATOMIC_ACQUIRE) > 0) {
    r2s_link_t *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);
    short want = (short)(ev->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
    if (l) (void)r2s__link_poll(l, fd, want, &owned);
    if (l && (owned & want)) wake_waiters(r, epfd);
  }
  if (c) r2s__conn_put(c);
}

/* The wake-up of epoll waits that sleep without a slice (poke.h). */
#include "poke.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "libc.h"
#include "stats.h"

int r2s__poke_sleepers;

/* The socket pair, replaced whole (never changed in place) so that a
 * poke reads a consistent one without a lock. A replaced one is left
 * allocated: it is made again only when the application closed the
 * shim's descriptors. */
typedef struct poke_sock_s {
  int rd, wr;
  ino_t rd_ino, wr_ino;
} poke_sock_t;

static poke_sock_t *sock;

static bool sock_ok(const poke_sock_t *s)
{
  return s && r2s__still_sock(s->rd, s->rd_ino) && r2s__still_sock(s->wr, s->wr_ino);
}

static poke_sock_t *sock_make(void)
{
  int sv[2];
  poke_sock_t *n = malloc(sizeof *n);
  if (!n) return NULL;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0) {
    /* Kept at numbers of the shim's (libc.h); the originals go. */
    n->rd = r2s__keep_fd(sv[0], &n->rd_ino);
    n->wr = r2s__keep_fd(sv[1], &n->wr_ino);
    r2s__libc.close(sv[0]);
    r2s__libc.close(sv[1]);
    if (n->rd >= 0 && n->wr >= 0) return n;
    if (n->rd >= 0) r2s__libc.close(n->rd);
    if (n->wr >= 0) r2s__libc.close(n->wr);
  }
  free(n);
  return NULL;
}

/* The socket, made on first use (or anew); NULL if it cannot be had. No
 * lock (a fork() could leave one held): of two threads that make one at
 * once, the first to publish wins and the other closes its own. */
static poke_sock_t *sock_ready(void)
{
  poke_sock_t *s = __atomic_load_n(&sock, __ATOMIC_ACQUIRE);
  if (sock_ok(s)) return s;
  poke_sock_t *n = sock_make();
  if (!n) return NULL;
  if (__atomic_compare_exchange_n(&sock, &s, n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return n;
  r2s__libc.close(n->rd);
  r2s__libc.close(n->wr);
  free(n);
  return sock_ok(s) ? s : NULL;
}

bool r2s__poke_join(int epfd, uint64_t key, uint64_t *joined)
{
  poke_sock_t *s = sock_ready();
  if (!s) return false;
  if (*joined == (uint64_t)s->rd_ino) return true;
  /* Edge-triggered: each byte written is an edge in every set, however
   * many bytes already lie unread (see the contract). */
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = key};
  if (r2s__libc.epoll_ctl(epfd, EPOLL_CTL_ADD, s->rd, &ev) < 0 &&
      (errno != EEXIST || r2s__libc.epoll_ctl(epfd, EPOLL_CTL_MOD, s->rd, &ev) < 0))
    return false;
  *joined = (uint64_t)s->rd_ino;
  return true;
}

uint64_t r2s__poke_id(void)
{
  poke_sock_t *s = __atomic_load_n(&sock, __ATOMIC_ACQUIRE);
  return s ? (uint64_t)s->rd_ino : 0;
}

void r2s__poke_sleep_begin(void)
{
  __atomic_add_fetch(&r2s__poke_sleepers, 1, __ATOMIC_SEQ_CST);
}

void r2s__poke_sleep_end(void)
{
  __atomic_sub_fetch(&r2s__poke_sleepers, 1, __ATOMIC_SEQ_CST);
}

void r2s__poke(void)
{
  /* Not ours any more (the application closed the shim's descriptors): a
   * new one, which the sets join at their next wait. */
  poke_sock_t *s = __atomic_load_n(&sock, __ATOMIC_ACQUIRE);
  if (!s || (!sock_ok(s) && !(s = sock_ready()))) return;
  R2S_STAT_INC(pokes);
  char b = 1;
  if (r2s__libc.send(s->wr, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno != EAGAIN) return;
  char buf[256];
  while (r2s__libc.recv(s->rd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
  (void)r2s__libc.send(s->wr, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

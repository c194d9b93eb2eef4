/* epoll_wait over a set that holds carried connections: the links'
 * answers for their registrations (with the edge and one-shot rules of
 * readiness.h), the kernel's for the rest, and the wait engine (wait.h)
 * while nobody answers. */
#include "readiness.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "clock.h"
#include "conn.h"
#include "epoll_index.h"
#include "libc.h"
#include "link.h"
#include "poke.h"
#include "ready_conn.h"
#include "wait.h"

static int64_t now_ms(void)
{
  return r2s__now_ns() / 1000000;
}

/* EPOLLET (readiness.h): of the bits the link owns and reports ready, one
 * is reported again only once its side of the ring moved since this entry
 * last reported it (new bytes or the end of the stream; room the peer
 * freed), as the kernel reports a socket's edges. Level-triggered, an idle
 * connection with room in its ring made every epoll_wait of an
 * EPOLLIN|EPOLLOUT|EPOLLET registration (nginx's) return at once: a
 * thread at full CPU. Where the link cannot tell, the bit stays
 * level-triggered: an extra event is harmless, a lost one is not. r->lock
 * held. */
static uint32_t edges_only(r2s_ep_entry_t *e, r2s_link_t *l, uint32_t got, short owned)
{
  static const short bits[2] = {POLLIN, POLLOUT};
  if (!(e->events & EPOLLET) || (got & EPOLLERR)) return got;
  for (int i = 0; i < 2; i++) {
    uint64_t gen;
    if (!(got & (uint32_t)bits[i]) || !(owned & bits[i])) continue;
    if (!r2s__link_edge_gen(l, bits[i], &gen)) {
      e->et_have &= (uint8_t) ~(1u << i);
    } else if ((e->et_have & (1u << i)) && gen == e->et_gen[i]) {
      got &= ~(uint32_t)bits[i];
    } else {
      e->et_gen[i] = gen;
      e->et_have |= (uint8_t)(1u << i);
    }
  }
  return got;
}

/* The links a wait armed, to be unarmed by that wait: an entry of the set
 * may change or go meanwhile, and another thread's wait may have armed
 * the same links (each link counts its armed waits, and the last one
 * clears the peer's word). Kept by connection, as the set keeps them. */
typedef struct armed_s {
  int fd;
  uint32_t conn_id;
  r2s_conn_t *conn;
  short events;
} armed_t;

typedef struct arm_list_s {
  armed_t *v;
  unsigned n, cap;
  bool sure; /* every change of the armed links wakes the kernel's wait */
} arm_list_t;

static bool arm_list_add(arm_list_t *a, const r2s_ep_entry_t *e, short events)
{
  if (a->n == a->cap) {
    unsigned cap = a->cap ? a->cap * 2 : 64;
    armed_t *v = realloc(a->v, cap * sizeof *v);
    if (!v) return false;
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = (armed_t){e->fd, e->conn_id, e->conn, events};
  return true;
}

/* How long a set's list of active links stands for the set without a
 * look at every entry: that look also learns whether any connection is
 * carried at all, which pass-through may have ended. */
#define ACT_LIST_NS 1000000000ll

/* How long an entry stays unreported before a wait that arms leaves its
 * link to the kernel (r2s__link_quiet, quiet_fits): a crowd
 * of idle keep-alive connections in their rings then costs a wait nothing
 * per connection either. Each such link that wakes makes every set look
 * at all its connections once; not sooner than this keeps that rare. */
#define QUIET_NS 1000000000ll

/* Whether an entry wanting `want` may leave its link to the kernel: it
 * wants to read (a quiet link is one whose doorbell the kernel reports as
 * readable); one that also wants to write has its link armed for room too
 * (r2s__link_quiet). */
static bool quiet_fits(short want)
{
  return (want & EPOLLIN) != 0;
}

/* Whether the list of active links (r->act) can stand for the whole set:
 * made since the last link of the process became active, and less than
 * ACT_LIST_NS ago. r->lock held. */
static bool act_list_stands(const r2s_ep_reg_t *r, int64_t now)
{
  return r->act_valid && r->act_epoch == __atomic_load_n(&r2s__link_activations, __ATOMIC_SEQ_CST) &&
         now - r->act_ns < ACT_LIST_NS;
}

/* Takes the i-th fd off the list of active links (the last takes its
 * place). r->lock held. */
static void act_drop(r2s_ep_reg_t *r, unsigned i)
{
  r->act[i] = r->act[--r->nact];
}

/* The events of one collect() that are put in order (order_ready). */
#define ORDER_MAX 256

/* out[0..k) in the order their links' bytes came (stamp[i]; UINT64_MAX,
 * not known: last), stably: the kernel's epoll reports sockets in the order they
 * became ready, and programs rely on it across connections (redis's own
 * tests send a command on one connection and, without waiting for its
 * answer, one on another that must see its effect: the server has to read
 * them in that order). A look at the rings finds them all ready at once;
 * the producers' stamps (ring.h, filled_at) say which came first. */
static void order_ready(struct epoll_event *out, uint64_t *stamp, int k)
{
  for (int i = 1; i < k; i++) {
    struct epoll_event ev = out[i];
    uint64_t s = stamp[i];
    int j = i;
    for (; j > 0 && stamp[j - 1] > s; j--) {
      out[j] = out[j - 1];
      stamp[j] = stamp[j - 1];
    }
    out[j] = ev;
    stamp[j] = s;
  }
}

/* Readiness of the carried connections registered in r, up to max events;
 * -ENOENT if none of its registrations is a carried connection. Only the
 * links that are active (r2s__link_active) are looked at: the kernel
 * answers for the others, through its own events (filter). They are
 * found on the set's list of them, which a look at every entry makes
 * again once a link of the process became active since, or a second has
 * passed: a crowd of idle connections costs a wait nothing per
 * connection. A wait that began at `began` (0: none) ends for the links
 * found ready. Arming (a not NULL), the links armed go on a's list;
 * a->sure is cleared if one of them may change without waking the
 * kernel's wait (r2s__link_wakes_sure), or could not be listed (then it
 * is not armed: the sleep keeps its slice). */
static int collect(r2s_ep_reg_t *r, struct epoll_event *out, int max, arm_list_t *a, int64_t began)
{
  bool arm = a != NULL;
  int k = 0;
  uint64_t stamp[ORDER_MAX];
  pthread_mutex_lock(&r->lock);
  int64_t now = r2s__now_ns();
  bool all = !act_list_stands(r, now);
  if (all) {
    /* Read before the look: a link that becomes active during it makes
     * the next wait look again. */
    r->act_epoch = __atomic_load_n(&r2s__link_activations, __ATOMIC_SEQ_CST);
    r->act_ns = now;
    r->act_valid = true;
    r->carried = false;
    r->nact = 0;
  }
  r->walk++;
  unsigned i = 0;
  while (all ? i < r->n : i < r->nact && k < max) {
    r2s_ep_entry_t *e;
    if (all) {
      e = &r->v[i++];
      e->active = false;
    } else {
      e = r2s__ep_find_fd(r, r->act[i]);
      if (!e || !e->active || e->walked == r->walk) { /* gone, registered anew, or twice on the list */
        act_drop(r, i);
        continue;
      }
      i++;
    }
    e->walked = r->walk;
    if (e->fired) continue;
    r2s_conn_t *c = r2s__ready_carried(e->fd);
    if (!c || !r2s__ep_same_conn(e, c)) {
      if (c) r2s__conn_put(c);
      if (!all) e->active = false, act_drop(r, --i); /* in pass-through now, or another connection */
      continue;
    }
    r->carried = true;
    bool active = r2s__link_active(c->link);
    short want = (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
    /* A quiet link is the kernel's until it wakes (link.h); one not
     * reported for long becomes quiet, when this wait would arm it anyway
     * (for an entry whose wants it answers for: quiet_fits). */
    short quiet_for = r2s__link_quiet_events(c->link);
    bool quiet = quiet_for && !(want & (EPOLLIN | EPOLLOUT) & ~quiet_for);
    if (active && k < max && (quiet || (arm && now - e->busy_ns >= QUIET_NS)) && quiet_fits(want) &&
        (quiet || r2s__link_quiet(c->link, e->fd, want, now - QUIET_NS))) {
      if (!all) e->active = false, act_drop(r, --i);
      r2s__conn_put(c);
      continue;
    }
    if (all && active) (void)r2s__ep_act_add(r, e); /* no memory: the list is not valid, the next wait looks at all */
    if (!active || k >= max) {
      r2s__conn_put(c);
      continue;
    }
    short rev;
    if (arm) {
      if (arm_list_add(a, e, want)) {
        rev = r2s__link_arm(c->link, e->fd, want);
        if (a->sure && !r2s__link_wakes_sure(c->link)) a->sure = false;
      } else {
        rev = r2s__link_poll(c->link, e->fd, want, &owned) & owned;
        a->sure = false;
      }
    } else {
      rev = r2s__link_poll(c->link, e->fd, want, &owned) & (short)(owned | POLLERR);
    }
    if (arm) owned = rev; /* r2s__link_arm answers for owned bits only */
    uint32_t got = edges_only(e, c->link, (uint32_t)rev & (e->events | EPOLLERR | EPOLLHUP), owned);
    if (got & (EPOLLIN | EPOLLOUT | EPOLLERR)) {
      if (began)
        r2s__link_spin_learn(c->link, (short)(got & (EPOLLIN | EPOLLOUT)), r2s__now_ns() - began, true);
      if (k < ORDER_MAX) {
        uint64_t at = (got & EPOLLIN) ? r2s__link_filled_at(c->link) : 0;
        stamp[k] = at ? at : UINT64_MAX;
      }
      out[k++] = (struct epoll_event){.events = got, .data.u64 = e->data};
      e->round = r->round;
      e->busy_ns = now;
      if (e->events & EPOLLONESHOT) e->fired = true;
    }
    r2s__conn_put(c);
  }
  bool carried = r->carried;
  pthread_mutex_unlock(&r->lock);
  if (k > 1) order_ready(out, stamp, k < ORDER_MAX ? k : ORDER_MAX);
  return carried || k ? k : -ENOENT;
}

/* The links on a's list, of connections still carried: a link gone since
 * took its count with it. */
static void unarm_all(arm_list_t *a)
{
  for (unsigned i = 0; i < a->n; i++) {
    armed_t *m = &a->v[i];
    r2s_conn_t *c = r2s__ready_carried(m->fd);
    if (!c) continue;
    if (c == m->conn && c->id == m->conn_id) r2s__link_unarm(c->link, m->events);
    r2s__conn_put(c);
  }
  a->n = 0;
}

/* An entry already reported in this call (from its link's answer, in
 * done[0..ndone)) gets the kernel's bits that the link does not own added
 * to that report, not a second one. Dropping them lost an edge: with
 * EPOLLET the kernel reports EPOLLOUT once, and an exec'd server whose
 * link kept reporting EPOLLIN (the peer's end) never learnt that it could
 * write again (the progs fork-exec stall). */
static void merge_reported(r2s_conn_t *c, const r2s_ep_entry_t *e, uint32_t events, struct epoll_event *done,
                           int ndone)
{
  short owned;
  (void)r2s__link_poll(c->link, e->fd, (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), &owned);
  uint32_t extra =
      events & ~(uint32_t)owned & (e->events | EPOLLERR | EPOLLHUP) & ~(uint32_t)(EPOLLET | EPOLLONESHOT);
  for (int m = 0; m < ndone && extra; m++)
    if (done[m].data.u64 == e->data) done[m].events |= extra;
}

/* Kernel events on a carried connection: for the bits the link owns the
 * kernel saw doorbells or frames, so the link's answer replaces them; the
 * other bits stand. An entry already reported in this call is not
 * reported twice (see merge_reported). A wait that began at `began` (0:
 * none) ends for the links found ready, as in collect(). */
static int filter(r2s_ep_reg_t *r, struct epoll_event *done, int ndone, struct epoll_event *ev, int k,
                  int64_t began)
{
  int out = 0;
  pthread_mutex_lock(&r->lock);
  for (int j = 0; j < k; j++) {
    uint32_t events = ev[j].events;
    if (r2s__epoll_is_wake(r, &ev[j])) continue;
    r2s_ep_entry_t *e = r2s__ep_find_data(r, ev[j].data.u64);
    r2s_conn_t *c = e ? r2s__ready_carried(e->fd) : NULL;
    if (c) {
      if (r2s__ep_same_conn(e, c)) {
        if (e->round == r->round) {
          merge_reported(c, e, events, done, ndone);
          events = 0;
        } else {
          short want = (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP)), owned;
          r2s__link_pump(c->link, -1); /* the kernel saw bytes: frames to read */
          short rev = r2s__link_poll(c->link, e->fd, want, &owned);
          events = (events & ~(uint32_t)owned) |
                   edges_only(e, c->link, (uint32_t)(rev & owned) & e->events, owned);
          if (!(owned & POLLIN))
            events =
                (uint32_t)(uint16_t)r2s__ready_kernel_in(c, e->fd, want, (short)events) | (events & ~0xffffu);
          if ((events & EPOLLPRI) && r2s__ready_urgent_hidden(c, e->fd)) events &= ~(uint32_t)EPOLLPRI;
          if (events) e->round = r->round, e->busy_ns = r2s__now_ns();
          if (began && (rev & owned & (POLLIN | POLLOUT)))
            r2s__link_spin_learn(c->link, (short)(rev & owned & (POLLIN | POLLOUT)), r2s__now_ns() - began,
                                 true);
        }
      }
      r2s__conn_put(c);
    }
    if (events & ~(uint32_t)(EPOLLET | EPOLLONESHOT)) {
      ev[j].events = events;
      ev[out++] = ev[j];
    }
  }
  pthread_mutex_unlock(&r->lock);
  return out;
}

/* An epoll wait over registry r (wait.h); w first, as the hooks get it. */
typedef struct ep_wait_s {
  r2s_wait_t w;
  r2s_ep_reg_t *r;
  int k;         /* what arming collected: events in w.ev[0..k), or -ENOENT */
  bool poked;    /* counted among the sleepers a poke wakes (poke.h), until unarmed */
  arm_list_t a;  /* the links armed, until unarmed */
} ep_wait_t;

/* The carried entries not yet fired (EPOLLONESHOT) whose links are
 * active (those on the set's list, while it stands), under the registry
 * lock, for the spin and the nap. */
static void each_entry(r2s_wait_t *w, r2s_wait_visit_t fn, void *arg)
{
  r2s_ep_reg_t *r = ((ep_wait_t *)w)->r;
  bool stop = false;
  pthread_mutex_lock(&r->lock);
  bool all = !act_list_stands(r, r2s__now_ns());
  for (unsigned i = 0; i < (all ? r->n : r->nact) && !stop; i++) {
    r2s_ep_entry_t *e = all ? &r->v[i] : r2s__ep_find_fd(r, r->act[i]);
    if (!e || e->fired || (!all && !e->active)) continue;
    r2s_conn_t *c = r2s__ready_carried(e->fd);
    if (!c) continue;
    short want = (short)(e->events & (EPOLLIN | EPOLLOUT));
    if (r2s__ep_same_conn(e, c) && r2s__link_active(c->link)) stop = fn(arg, c->link, want, want);
    r2s__conn_put(c);
  }
  pthread_mutex_unlock(&r->lock);
}

/* Arms, and catches what raced in. With the poke in the set, counted
 * among its sleepers before the first link is armed, the wait may sleep
 * without a slice (wait.h): from then on, a thread that takes a doorbell
 * of one of its links, or changes one, wakes it (poke.h). */
static bool arm(r2s_wait_t *w)
{
  ep_wait_t *e = (ep_wait_t *)w;
  pthread_mutex_lock(&e->r->lock);
  e->poked = r2s__epoll_join_poke(e->r, w->epfd);
  pthread_mutex_unlock(&e->r->lock);
  if (e->poked) r2s__poke_sleep_begin();
  e->a.sure = e->poked;
  e->k = collect(e->r, w->ev, w->max, &e->a, w->began);
  w->unsliced = e->a.sure;
  return e->k != 0;
}

static void unarm(r2s_wait_t *w)
{
  ep_wait_t *e = (ep_wait_t *)w;
  unarm_all(&e->a);
  if (e->poked) r2s__poke_sleep_end();
  e->poked = false;
}

/* The k events the links answered, and the kernel's instant answer for
 * the rest of the set. */
static int with_kernel(ep_wait_t *e, int k)
{
  r2s_wait_t *w = &e->w;
  int more = r2s__wait_kernel_epoll(w->epfd, w->ev + k, w->max - k, 0, w->mask);
  return more < 0 ? k : k + filter(e->r, w->ev, k, w->ev + k, more, w->began);
}

static int woke(r2s_wait_t *w, r2s_wait_woke_t how, int rc, int ms)
{
  ep_wait_t *e = (ep_wait_t *)w;
  if (how == R2S_WAIT_ARMED_READY) return e->k < 0 ? e->k : with_kernel(e, e->k);
  if (rc < 0) return rc;
  rc = filter(e->r, w->ev, 0, w->ev, rc, w->began);
  if (rc > 0 || how == R2S_WAIT_NAPPED || ms) return rc;
  /* Only doorbells (or nothing), and the time is up: a last look at the
   * links. */
  int k = collect(e->r, w->ev, w->max, NULL, w->began);
  return k > 0 ? k : -ETIMEDOUT;
}

static const r2s_wait_ops_t ep_ops = {each_entry, NULL, NULL, arm, unarm, NULL, woke};

int r2s__ready_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask)
{
  r2s_ep_reg_t *r = r2s__epoll_reg(epfd, false);
  if (!r || max <= 0) return -ENOENT;
  ep_wait_t e = {.w = {.ops = &ep_ops, .epfd = epfd, .ev = ev, .max = max, .mask = mask}, .r = r};
  e.w.deadline = r2s__wait_deadline_ms(timeout_ms);
  e.w.kernel_in_sleep = true;
  for (;;) {
    pthread_mutex_lock(&r->lock);
    r->round++;
    pthread_mutex_unlock(&r->lock);
    int k = collect(r, ev, max, NULL, e.w.began);
    int rc = k < 0 ? k : k > 0 ? with_kernel(&e, k) : r2s__wait_round(&e.w);
    if (rc != 0) {
      free(e.a.v);
      return rc == -ETIMEDOUT ? 0 : rc; /* -ENOENT: nothing of ours in this set, the kernel alone */
    }
  }
}

static int epoll_wait_counted(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                              const struct timespec *exact, bool may_shim);

int r2s__epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                    const struct timespec *exact, bool may_shim)
{
  /* Counted as a waiter on the set while the process carries connections
   * (the registry is made for it): one of them added meanwhile wakes it
   * (r2s_ep_wake_t). Before any is carried, none can have bytes in a ring. */
  r2s_ep_reg_t *r =
      may_shim && __atomic_load_n(&r2s__links_active, __ATOMIC_RELAXED) ? r2s__epoll_reg(epfd, true) : NULL;
  if (r) __atomic_add_fetch(&r->waiters, 1, __ATOMIC_ACQ_REL);
  int rc = epoll_wait_counted(epfd, ev, max, timeout_ms, mask, exact, may_shim);
  if (r) __atomic_sub_fetch(&r->waiters, 1, __ATOMIC_ACQ_REL);
  return rc;
}

static int epoll_wait_counted(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                              const struct timespec *exact, bool may_shim)
{
  int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
  for (bool first = true;; first = false) {
    int ms = timeout_ms;
    if (!first && deadline >= 0) {
      int64_t left = deadline - now_ms();
      ms = left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
    }
    int rc = -ENOENT;
    if (may_shim && __atomic_load_n(&r2s__links_active, __ATOMIC_RELAXED) != 0)
      rc = r2s__ready_epoll_wait(epfd, ev, max, ms, mask);
    if (rc != -ENOENT) return rc;
    if (first && exact) {
      if (!r2s__libc.epoll_pwait2) return -ENOSYS;
      rc = r2s__libc.epoll_pwait2(epfd, ev, max, exact, mask);
      if (rc < 0) rc = -errno;
    } else {
      rc = r2s__wait_kernel_epoll(epfd, ev, max, ms, mask);
    }
    r2s_ep_reg_t *r = rc > 0 ? r2s__epoll_reg(epfd, false) : NULL;
    if (!r) return rc;
    int n = r2s__epoll_drop_wakes(r, ev, rc);
    /* Only the wake-up: a connection became ready meanwhile. */
    if (n > 0 || ms == 0) return n;
  }
}

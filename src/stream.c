/* Blocking, timeouts, MSG_WAITALL and SIGPIPE on top of the nonblocking
 * link operations. */
#include "stream.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "clock.h"
#include "iovec.h"
#include "link.h"
#include "sanitize.h"
#include "stats.h"
#include "wait.h"

#define READ_AHEAD_SLICE_MS 1
/* A doorbell is a byte on the socket that any thread of the connection may
 * read: a reader in recv() takes the one rung for a writer blocked in send()
 * on another thread (and the other way round), often between the kernel
 * waking the sleeper and its poll() looking again, which then sleeps on.
 * The sleeper cannot be told, so the loss costs its slice. A link where that
 * was seen (a slice ran out although another thread read a doorbell
 * meanwhile and our event is ready) sleeps in slices of STOLEN_CAP_MS,
 * doubled back up to R2S_WAIT_SLICE_MS by each slice that runs out without
 * it. */
#define STOLEN_CAP_MS 2

/* A blocked call's wait on its one link (wait.h); w first, as the hooks
 * get it. */
typedef struct stream_wait_s {
  r2s_wait_t w;
  r2s_conn_t *c;
  r2s_link_t *l;
  struct pollfd p; /* the kernel's side: the socket */
  short events;
  bool kernel;    /* spin: the link does not own the events, only the kernel can tell */
  bool rings;     /* spin: the rings alone carry the events, look at nothing else */
  int cap;        /* this round's slice */
  uint32_t bells; /* doorbells read on the link before it armed */
} stream_wait_t;

/* A slice of `cap` ms ran out: was our doorbell read by another thread
 * (see STOLEN_CAP_MS)? Sets the link's next slice. */
static void note_slice_expired(stream_wait_t *s)
{
  short owned;
  bool stolen = r2s__link_bells_read(s->l) != s->bells &&
                (r2s__link_poll(s->l, s->p.fd, s->events, &owned) & owned & s->events);
  int next = stolen ? STOLEN_CAP_MS : s->cap < R2S_WAIT_SLICE_MS ? s->cap * 2 : R2S_WAIT_SLICE_MS;
  __atomic_store_n(&s->c->wait_cap_ms, (uint32_t)(next < R2S_WAIT_SLICE_MS ? next : R2S_WAIT_SLICE_MS),
                   __ATOMIC_RELAXED);
}

static void each_link(r2s_wait_t *w, r2s_wait_visit_t fn, void *arg)
{
  stream_wait_t *s = (stream_wait_t *)w;
  (void)fn(arg, s->l, s->events, s->events);
}

/* Ends the poll when the ring is ready, and also when the link does not own
 * the events (before the peer's switch, DATA frames still to be sent over
 * TCP, after PLAIN): the ring will never answer those, and taking "not
 * mine" for "look again" made a blocked read spin on the socket at full
 * CPU, a server waiting for its request above all. Those wait in the
 * kernel instead. After the first look, a link whose rings carry the
 * events is asked about its rings only: a full look reads the socket
 * every 64th time (link/frames.c, pump_is_due), and a poll makes hundreds of
 * looks, so a 64 B ping-pong paid a failed recvfrom on every second
 * message for a doorbell nobody was asked to send. The socket's frames
 * (PLAIN, a dead peer's end) are read once the poll ends, when the wait
 * arms (r2s__link_arm); the budget bounds that delay. */
static bool spin_ready(void *arg)
{
  stream_wait_t *s = arg;
  if (s->rings) return (r2s__link_poll(s->l, -1, s->events, NULL) & s->events) != 0;
  short owned, rev = r2s__link_poll(s->l, s->p.fd, s->events, &owned);
  if (rev & owned & s->events) return true;
  s->kernel = !(owned & s->events);
  s->rings = !s->kernel && r2s__link_in_rings(s->l, s->events);
  return s->kernel;
}

/* The ring answered the wait: the link learns how long the whole wait took
 * (spin.h), and the next one begins afresh. */
static void answered(stream_wait_t *s)
{
  r2s__link_spin_learn(s->l, s->events, r2s__wait_waited(&s->w), true);
  s->w.began = 0;
}

static bool spun(r2s_wait_t *w)
{
  stream_wait_t *s = (stream_wait_t *)w;
  if (s->kernel) return false;
  answered(s);
  return true;
}

static bool arm(r2s_wait_t *w)
{
  stream_wait_t *s = (stream_wait_t *)w;
  s->bells = r2s__link_bells_read(s->l);
  return (r2s__link_arm(s->l, s->p.fd, s->events) & s->events) != 0;
}

static void unarm(r2s_wait_t *w)
{
  stream_wait_t *s = (stream_wait_t *)w;
  r2s__link_unarm(s->l, s->events);
}

/* The kernel side of the wait: doorbells and end of stream arrive on the
 * TCP socket, and a nap waits for those only. A reader waits for bytes as
 * the kernel's read does, and for the peer's lone hello (POLLPRI) only
 * where a switch could follow it now (r2s__link_wants_lone_marks): an
 * idle reader under `now` answers it at once, so that its peer can move
 * into a ring before the reader's application next calls. Elsewhere the
 * hello is taken with the bytes behind it: a short connection's server
 * sends its hello just before its response, and its client wakes once, as
 * on TCP, not once for each. A writer whose
 * bytes go over TCP waits for the kernel's POLLOUT only: bytes to read are
 * not for it, and the peer's (its hello, a DATA frame its application has
 * not read) kept the socket readable, so each of its sleeps returned at
 * once (2,684 of 2,781 of an iperf2 client's sleeps in a 4 s run between
 * two guests). */
static void to_kernel(r2s_wait_t *w, bool nap)
{
  stream_wait_t *s = (stream_wait_t *)w;
  s->p.revents = 0;
  if (nap) {
    s->p.events = POLLIN | POLLRDHUP;
    return;
  }
  short events = s->events;
  bool tx_ring = (events & POLLOUT) && r2s__link_in_rings(s->l, POLLOUT);
  short in = (events & POLLIN) ? (short)(POLLIN | (r2s__link_wants_lone_marks(s->l) ? POLLPRI : 0))
             : tx_ring         ? POLLIN
                               : 0;
  s->p.events = (short)(in | POLLRDHUP);
  if ((events & POLLOUT) && !tx_ring) s->p.events |= POLLOUT;
  r2s__conn_count_wait(s->c);
}

static int woke(r2s_wait_t *w, r2s_wait_woke_t how, int rc, int ms)
{
  stream_wait_t *s = (stream_wait_t *)w;
  r2s_link_t *l = s->l;
  if (how == R2S_WAIT_ARMED_READY) return 0;
  if (how == R2S_WAIT_NAPPED && rc == -EINTR) return -EINTR;
  if (rc > 0) r2s__link_pump(l, -1);
  if (how == R2S_WAIT_NAPPED) {
    if (r2s__link_poll(l, -1, s->events, NULL) & s->events) answered(s);
    return 0;
  }
  if (rc == 0 && ms == s->cap) note_slice_expired(s);
  if (rc == 0) {
    r2s__link_spin_learn(l, s->events, r2s__wait_waited(w), false);
  } else if (rc > 0 && (r2s__link_poll(l, -1, s->events, NULL) & s->events)) {
    answered(s);
  } else if (rc > 0 && !(s->p.revents & (POLLERR | POLLHUP | POLLRDHUP)) &&
             (r2s__link_in_rings(l, s->events) || !(s->p.revents & s->events))) {
    /* Woken with nothing for us yet, as far as the answers at hand tell
     * (no further look: this follows every sleep): the rings carry the
     * wait and had nothing, or the kernel woke us for something else. A
     * doorbell that overtook the bytes or room it announces, or frames on
     * the socket that are not ours to wait for (a writer used to wake at
     * once, sleep after sleep, for a DATA frame its application had not
     * read: docs/rdma.md). */
    R2S_STAT_INC(waits_woke_early);
  }
  return rc == -EINTR ? -EINTR : 0;
}

static const r2s_wait_ops_t stream_ops = {each_link, spin_ready, spun, arm, unarm, to_kernel, woke};

static void wait_init(stream_wait_t *s, r2s_conn_t *c, int fd, short events)
{
  *s = (stream_wait_t){.w = {.ops = &stream_ops, .fds = &s->p, .nfds = 1, .epfd = -1, .stream = true}};
  s->c = c, s->l = c->link, s->p.fd = fd, s->events = events;
}

/* Waits until the events may be ready on the link, or s->w.deadline (0:
 * none) passes. Returns 0 (look again), -EAGAIN (timed out) or -EINTR.
 * s->w.began is when the caller's wait began (set on its first round,
 * cleared when the ring answered), so that the link learns how long the
 * whole wait took (spin.h). */
static int wait_for(stream_wait_t *s)
{
  s->kernel = s->rings = false;
  int cap = (int)__atomic_load_n(&s->c->wait_cap_ms, __ATOMIC_RELAXED);
  if (cap <= 0 || cap > R2S_WAIT_SLICE_MS) cap = R2S_WAIT_SLICE_MS;
  /* Bytes a sender reads ahead leave the socket without waking us: while
   * that can happen (the handshake phase only), sleep in short slices. */
  if ((s->events & POLLIN) && cap > READ_AHEAD_SLICE_MS && r2s__link_may_read_ahead(s->l))
    cap = READ_AHEAD_SLICE_MS;
  s->cap = s->w.cap_ms = cap;
  int rc = r2s__wait_round(&s->w);
  return rc == -ETIMEDOUT ? -EAGAIN : rc;
}

static int64_t deadline_of(uint32_t timeout_ms)
{
  return timeout_ms ? r2s__now_ns() + (int64_t)timeout_ms * 1000000 : 0;
}

static bool nonblocking(r2s_conn_t *c, int flags)
{
  return (flags & MSG_DONTWAIT) || (r2s__conn_flags(c) & R2S_CONN_NONBLOCK);
}

/* A receive of no bytes (recv, recvfrom, recvmsg; read and readv never get
 * here, see preload/io.c). Linux's tcp_recvmsg, measured on 6.18, takes no
 * byte and answers with what a read would meet first: 0 for bytes or the
 * end of the stream, the pending error when no byte is in front of it,
 * EAGAIN when nonblocking and nothing is there. A blocking one waits for
 * the socket's first wake-up, whatever it is (bytes, end, error, SO_RCVTIMEO,
 * a signal), and then returns 0. The link reads an empty read as the end of
 * the stream (recvmsg's 0), so it is never given one: a one-byte peek asks
 * the same question without moving the stream. After a wait, 0 as the
 * kernel: an error that came meanwhile is left for the next read. */
static ssize_t recv_nothing(r2s_conn_t *c, int fd, int flags)
{
  char byte;
  struct iovec one = {&byte, 1};
  bool nb = nonblocking(c, flags);
  stream_wait_t s;
  wait_init(&s, c, fd, POLLIN);
  for (bool waited = false;; waited = true) {
    ssize_t n = r2s__link_recv(c->link, fd, &one, 1, MSG_PEEK, NULL);
    if (n != -EAGAIN) return n >= 0 || waited ? 0 : n;
    if (nb) return -EAGAIN;
    if (!s.w.deadline && c->rcvtimeo_ms) s.w.deadline = deadline_of(c->rcvtimeo_ms);
    if (wait_for(&s) < 0) return 0;
  }
}

/* Counts the n bytes of one link call on the paths it reports it used. */
static void count_moved(r2s_conn_t *c, void (*count)(r2s_conn_t *, r2s_path_t, long long), ssize_t n,
                        const r2s_link_moved_t *mv)
{
  long long ring = (long long)mv->ring;
  if (ring > 0) count(c, (r2s_path_t)mv->ring_path, ring);
  if (n > ring) count(c, R2S_PATH_TCP, n - ring);
}

/* The iovecs of a call's next step, `done` bytes in: the caller's own,
 * untouched, for a first step the link may take whole (the ring needs no
 * copy of them); else at most REST_IOVS of them from byte `done` on, in
 * rest. *k: how many. */
#define REST_IOVS 64
static const struct iovec *iov_from(struct iovec *rest, const struct iovec *iov, int cnt, size_t done, int *k)
{
  if (!done && cnt <= REST_IOVS) {
    *k = cnt;
    return iov;
  }
  *k = r2s__iov_advance(rest, REST_IOVS, iov, cnt, done);
  return rest;
}

ssize_t r2s__stream_recv(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags)
{
  R2S_SANITIZE_IOV(iov, cnt);
  r2s_link_t *l = c->link;
  size_t want = r2s__iov_total(iov, cnt), done = 0;
  if (want == 0) return recv_nothing(c, fd, flags);
  bool nb = nonblocking(c, flags), waitall = (flags & MSG_WAITALL) && !(flags & MSG_PEEK);
  stream_wait_t s;
  wait_init(&s, c, fd, POLLIN);
  /* A blocking read whose link reads the ring polls the ring alone before
   * its first read (link.h, r2s__link_spin_rx); if the whole budget passed
   * without bytes, its wait then sleeps without polling again. */
  if (!nb && !(flags & (MSG_PEEK | MSG_WAITALL)) && r2s__link_in_rings(l, POLLIN))
    (void)r2s__link_spin_rx(l, &s.w.began);
  s.w.polled = s.w.began != 0;
  struct iovec rest[REST_IOVS];
  for (;;) {
    int k;
    const struct iovec *v = iov_from(rest, iov, cnt, done, &k);
    r2s_link_moved_t mv;
    ssize_t n = r2s__link_recv(l, fd, v, k, flags & MSG_PEEK, &mv);
    if (n > 0) s.w.began = 0;
    if (n > 0) {
      if (!(flags & MSG_PEEK)) count_moved(c, r2s__conn_count_rx, n, &mv);
      done += (size_t)n;
      if (!waitall || done >= want) return (ssize_t)done;
      continue;
    }
    if (n == 0) return (ssize_t)done;
    if (n != -EAGAIN) return done ? (ssize_t)done : n;
    if (nb) return done ? (ssize_t)done : -EAGAIN;
    /* SO_RCVTIMEO counts from the start of the wait: the ring's poll, if
     * it polled (began). */
    if (!s.w.deadline && c->rcvtimeo_ms)
      s.w.deadline = (s.w.began ? s.w.began : r2s__now_ns()) + (int64_t)c->rcvtimeo_ms * 1000000;
    int rc = wait_for(&s);
    if (rc < 0) return done ? (ssize_t)done : rc;
  }
}

ssize_t r2s__stream_send(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags)
{
  R2S_SANITIZE_IOV(iov, cnt);
  r2s_link_t *l = c->link;
  size_t want = r2s__iov_total(iov, cnt), done = 0;
  bool nb = nonblocking(c, flags), waiting = false;
  stream_wait_t s;
  struct iovec rest[REST_IOVS];
  for (;;) {
    int k;
    const struct iovec *v = iov_from(rest, iov, cnt, done, &k);
    r2s_link_moved_t mv;
    ssize_t n = want == done ? 0 : r2s__link_send(l, fd, v, k, flags & ~MSG_DONTWAIT, &mv);
    if (n > 0) {
      if (waiting) s.w.began = 0;
      count_moved(c, r2s__conn_count_tx, n, &mv);
      done += (size_t)n;
      if (done >= want || nb) return (ssize_t)done;
      continue;
    }
    if (want == done) return (ssize_t)done;
    if (n == -EPIPE) {
      if (!(flags & MSG_NOSIGNAL)) pthread_kill(pthread_self(), SIGPIPE);
      return done ? (ssize_t)done : -EPIPE;
    }
    if (n != -EAGAIN) return done ? (ssize_t)done : n;
    if (nb) return done ? (ssize_t)done : -EAGAIN;
    /* The wait is set up once a write has to wait. */
    if (!waiting) wait_init(&s, c, fd, POLLOUT), waiting = true;
    if (!s.w.deadline && c->sndtimeo_ms) s.w.deadline = deadline_of(c->sndtimeo_ms);
    int rc = wait_for(&s);
    if (rc < 0) return done ? (ssize_t)done : rc;
  }
}

ssize_t r2s__stream_send_oob(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags)
{
  size_t total = r2s__iov_total(iov, cnt);
  if (total == 0) return 0;
  struct iovec head[64];
  int k = 0;
  size_t left = total - 1, done = 0;
  for (int i = 0; i < cnt && k < 64 && left; i++) {
    if (!iov[i].iov_len) continue;
    head[k] = iov[i];
    if (head[k].iov_len > left) head[k].iov_len = left;
    left -= head[k].iov_len;
    k++;
  }
  if (total > 1) {
    ssize_t n = r2s__stream_send(c, fd, head, k, flags & ~MSG_OOB);
    if (n < 0 || (size_t)n < total - 1) return n;
    done = (size_t)n;
  }
  /* The last byte of the vector. */
  const char *last = NULL;
  for (int i = cnt - 1; i >= 0 && !last; i--)
    if (iov[i].iov_len) last = (const char *)iov[i].iov_base + iov[i].iov_len - 1;
  ssize_t n = r2s__link_send_oob(c->link, fd, last, 1, flags | MSG_NOSIGNAL, nonblocking(c, flags));
  if (n < 0) {
    if (n == -EPIPE && !(flags & MSG_NOSIGNAL)) pthread_kill(pthread_self(), SIGPIPE);
    return done ? (ssize_t)done : n;
  }
  r2s__conn_count_tx(c, R2S_PATH_TCP, n);
  return (ssize_t)(done + (size_t)n);
}

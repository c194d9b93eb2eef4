/*
 * wait.h - the one way a call of the shim waits for carried connections:
 * a blocked recv/send (stream.c), poll and select (poll_select.c),
 * epoll_wait (epoll_wait.c).
 *
 * Contract:
 *  - A wait is a loop of the caller's own look (with system calls: a
 *    read, poll's instant answer, the links of an epoll set) and rounds of
 *    r2s__wait_round while that look finds nothing. A round, written here
 *    once for all callers, goes through these steps until one answers:
 *      spin:  poll the links' rings without a system call for the longest
 *             budget of the set (spin.h; a set of at most WAIT_PROBE_LINKS
 *             links may probe);
 *      nap:   a stream's reader sleeps in the kernel for the shortest nap
 *             of the set (r2s__link_nap_ns) without asking for a doorbell,
 *             if the nap ends before the deadline;
 *      arm:   ask the peers for doorbells (r2s__link_arm), re-check;
 *      sleep: one slice in the kernel, at most R2S_WAIT_SLICE_MS (a lost
 *             wake-up costs latency, never a hang) and never past the
 *             deadline, on the caller's pollfds or epoll fd, with the
 *             caller's signal mask (NULL: none), by poll/ppoll or
 *             epoll_wait/epoll_pwait(2); until the deadline instead when
 *             the source's arming found nothing that could be lost
 *             (unsliced: every change of its links wakes the kernel's
 *             wait, a doorbell or a poke, poke.h);
 *      unarm: after the sleep, or at once if arming found a link ready.
 *    The links learn from each wait (r2s__link_spin_learn) through the
 *    source's hooks, which know what answered; r2s__wait_waited says for
 *    how long the wait has lasted.
 *  - Counters: waits_polled (a readiness wait that polls; a stream's
 *    blocked call, on every message's path, is not counted), waits_nap,
 *    waits_sleep, waits_slice_expired (a whole R2S_WAIT_SLICE_MS slice
 *    passed with nothing).
 *  - A round returns 0 (look again), > 0 (the source's answer, passed
 *    through), -ETIMEDOUT (the deadline passed with nothing), or another
 *    -errno (-EINTR: a signal came, as the kernel's call reported it).
 *    Hooks see the kernel's answers as counts or -errno, never errno.
 *  - The hooks run on the waiting thread and take only the locks their
 *    source already takes (an epoll set's registry lock, links' locks
 *    tried); the engine holds none.
 */
#ifndef R2S_WAIT_H
#define R2S_WAIT_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "link.h"

/* The longest sleep in the kernel between two looks at the links. */
#define R2S_WAIT_SLICE_MS 100

typedef struct r2s_wait_s r2s_wait_t;

/* Called for each carried connection of the set: its link, the events it
 * waits for, and those of them its link answered at the caller's last look
 * (a nap is for those only). Returns true to stop the walk. */
typedef bool (*r2s_wait_visit_t)(void *arg, r2s_link_t *l, short events, short owned);

typedef enum { R2S_WAIT_NAPPED, R2S_WAIT_ARMED_READY, R2S_WAIT_SLEPT } r2s_wait_woke_t;

typedef struct r2s_wait_ops_s {
  /* Visits the set's carried connections (the spin's budget, the nap). */
  void (*each)(r2s_wait_t *w, r2s_wait_visit_t fn, void *arg);
  /* The spin's look, without a system call; NULL: a link whose ring
   * answers (r2s__link_poll without a socket) of those each() visits. */
  bool (*ring)(void *w);
  /* The spin ended with ring() true: whether that answers the round (0
   * returned); false: the wait goes on to the kernel. NULL: true. */
  bool (*spun)(r2s_wait_t *w);
  /* Asks the peers for doorbells; true if a link was found ready (then
   * unarm() and woke(R2S_WAIT_ARMED_READY) follow at once). */
  bool (*arm)(r2s_wait_t *w);
  void (*unarm)(r2s_wait_t *w);
  /* Before the kernel is asked (nap: a nap, else the slice): what it
   * watches in the pollfds. NULL: nothing to change (an epoll fd). */
  void (*to_kernel)(r2s_wait_t *w, bool nap);
  /* After a nap (rc: the kernel's count or -errno), after arming found a
   * link ready (rc: 0), after the slice of ms (rc as a nap's; unarmed
   * already; ms < 0: unsliced, with no deadline): the round's answer (see
   * the contract). */
  int (*woke)(r2s_wait_t *w, r2s_wait_woke_t how, int rc, int ms);
} r2s_wait_ops_t;

struct r2s_wait_s {
  const r2s_wait_ops_t *ops;
  /* The kernel's side: pollfds (nfds of them), or an epoll fd (epfd >= 0)
   * whose events go to ev[0..max). */
  struct pollfd *fds;
  nfds_t nfds;
  int epfd;
  struct epoll_event *ev;
  int max;
  const sigset_t *mask;
  int64_t deadline; /* r2s__now_ns(); 0: none */
  int64_t began;    /* when the wait began (0: not yet), for learning */
  int cap_ms;       /* the slice's cap this round (0: R2S_WAIT_SLICE_MS) */
  /* Set by the source's arm(): this sleep needs no slice (see the
   * contract); cleared by the engine after each round. */
  bool unsliced;
  /* The caller polled the rings for their budget just before the first
   * round (r2s__link_spin_rx): that round does not poll again. */
  bool polled;
  /* A blocked recv or send, not a readiness wait: waits_polled is not
   * counted (see the contract). */
  bool stream;
  /* The caller's look does not ask the kernel (epoll: the set's other fds
   * are seen only by sleeping on it): the rings are polled once per call,
   * since each poll delays those fds by its budget, and a wait whose time
   * is up still sleeps a zero slice, the kernel's instant answer. */
  bool kernel_in_sleep;
};

/* A deadline timeout_ms from now as poll and epoll_wait count it (whole
 * milliseconds of the clock; < 0: none). */
int64_t r2s__wait_deadline_ms(int timeout_ms);

/* One round of the wait (see the contract). */
int r2s__wait_round(r2s_wait_t *w);

/* How long the wait has lasted (0: it has not begun). */
int64_t r2s__wait_waited(const r2s_wait_t *w);

/* The kernel's instant or timed answer, as a count or -errno: poll (with
 * a mask, ppoll) for ms (< 0: forever), epoll_wait (epoll_pwait). */
int r2s__wait_kernel_poll(struct pollfd *fds, nfds_t n, int ms, const sigset_t *mask);
int r2s__wait_kernel_epoll(int epfd, struct epoll_event *ev, int max, int ms, const sigset_t *mask);

#endif

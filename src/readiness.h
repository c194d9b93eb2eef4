/*
 * readiness.h - poll, select and epoll for connections whose bytes the
 * kernel does not see.
 *
 * Contract:
 *  - While no connection of the process is carried by the shim
 *    (r2s__links_active == 0, link.h) the wrappers call libc directly: nothing here
 *    runs.
 *  - Otherwise a wait asks each carried connection first (r2s__link_poll:
 *    the ring, frames; ready_conn.h merges the kernel's answer for the
 *    bits the link does not own), the kernel for everything else, and if
 *    nothing is ready waits through the wait engine (wait.h: spin, nap,
 *    arm, sleep in slices of at most R2S_WAIT_SLICE_MS so a lost wake-up
 *    costs latency, never a hang; an epoll wait whose links all wake it
 *    for sure sleeps until its time-out instead, poke.h).
 *  - poll and select: poll_select.c. epoll: the registrations the shim
 *    keeps per epoll fd, the set's wake-up and the forget and fork
 *    handlers in epoll_shadow.c (epoll_shadow.h), the wait in
 *    epoll_wait.c. A carried connection's readiness is reported with the
 *    application's data. Under
 *    EPOLLET, a bit the connection's ring answers is reported again only
 *    once that side of the ring moved (bytes or the end arrived, the peer
 *    freed room), as the kernel reports a socket's edges; where the link
 *    cannot tell (frames, another thread in the same direction, an error)
 *    it is reported level-triggered: an extra event is harmless to an
 *    edge-triggered reader, a lost one is not. EPOLLONESHOT is honoured
 *    until the next EPOLL_CTL_MOD, which also makes the next report an
 *    edge.
 *  - A carried connection added to (or modified in) an epoll set while its
 *    ring already answers the registration wakes the threads asleep on the
 *    set: the shim's own wake-up socket (at 512 and up) is registered in
 *    the set under a random key, made readable, and never reported.
 *    Lock order: the list of sets (r2s__epoll_forget), a set's registry
 *    lock, then a link's locks (r2s__link_poll only tries them).
 *  - All functions return a count or -errno and preserve the caller's
 *    pollfd/event arrays' meaning exactly as the kernel defines it.
 */
#ifndef R2S_READINESS_H
#define R2S_READINESS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>


/* timeout_ms < 0: forever. mask: as ppoll (NULL: none). */
int r2s__ready_poll(struct pollfd *fds, nfds_t n, int timeout_ms, const sigset_t *mask);
int r2s__ready_select(int n, fd_set *r, fd_set *w, fd_set *e, int timeout_ms, const sigset_t *mask);

void r2s__epoll_created(int epfd);
/* fd is being closed: if it was an epoll fd, its registrations go too. */
void r2s__epoll_closed(int fd);
void r2s__epoll_ctl_shadow(int epfd, int op, int fd, const struct epoll_event *ev);
/* The application closes fd, the last descriptor of connection c (a
 * socket the shim may keep open in a descriptor of its own): fd leaves
 * every epoll set it was added to, as the kernel's close would take it
 * out (epoll_shadow.c says why). Nothing for a connection never added. */
typedef struct r2s_conn_s r2s_conn_t;
void r2s__epoll_forget(int fd, r2s_conn_t *c);
/* pthread_atfork: prepare before fork, done after it in parent and child
 * (taken last, after the connections' and statistics' locks). */
void r2s__epoll_fork_prepare(void);
void r2s__epoll_fork_done(void);
/* In the child instead of fork_done: also re-initialises every set's
 * registry lock, which a thread absent from the child may have held. */
void r2s__epoll_fork_child(void);
/* Returns -ENOENT when nothing of the shim's is registered in epfd: the
 * caller then asks the kernel directly. */
int r2s__ready_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask);
/* epoll_wait, epoll_pwait and (with exact, its timeout to the nanosecond)
 * epoll_pwait2: the shim's wait while the process has carried connections
 * (may_shim: not a call of the shim's own), else the kernel's. The shim's
 * wake-up for the set (epoll_shadow.h, r2s_ep_wake_t) is never reported: a wait
 * it ends looks again until the timeout. Returns a count or -errno. */
int r2s__epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask,
                    const struct timespec *exact, bool may_shim);

#endif

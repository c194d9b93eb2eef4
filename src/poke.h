/*
 * poke.h - the wake-up of epoll waits that sleep without a slice.
 *
 * An epoll wait over carried connections may sleep in the kernel until its
 * deadline (no slice, wait.h) only if every way the links of its set can
 * become ready wakes the kernel's wait: a doorbell on the socket (asked
 * for by arming), a frame, the peer's end. A thread that takes such bytes
 * off the socket of a link that a sleeper armed (a reader in another
 * thread, a sender reading the peer's frames ahead), or that changes the
 * state of such a link (a switch, an error), may have taken the sleeper's
 * wake-up: it pokes (r2s__poke), and every wait sleeping without a slice
 * wakes, looks at its links again and re-arms.
 *
 * Contract:
 *  - The poke is one socket of the shim's (a socket pair at 512 and up,
 *    close-on-exec, its inode checked before each use, libc.h) registered
 *    edge-triggered in each set that sleeps without a slice, under the
 *    set's wake-up key (epoll_shadow.h): the wait drops it as it drops the
 *    set's own wake-up. Each poke is a byte written: every set it is
 *    registered in gets an edge. It is never drained while it has room,
 *    since a read by one set's waiter would take the edge from the
 *    others' before they looked; when full, it is drained and written
 *    again (every set wakes once more, harmless).
 *  - r2s__poke_join registers it in a set (r->lock held, as the set's
 *    wake-up is made); false: it cannot be had, and the set sleeps in
 *    slices as before.
 *  - r2s__poke_sleep_begin/end bracket a sleep without a slice, around the
 *    arming: a poke is sent only while such a sleep may be under way
 *    (r2s__poke_if), so a process whose epoll waits all sleep in slices,
 *    or that has none, pays one atomic load per link change.
 *  - r2s__poke never blocks and takes no lock: it is called under links'
 *    locks. Nothing here takes a lock (the socket is published by an
 *    atomic exchange), so a fork() at any point leaves nothing held.
 *  - After fork the child keeps the parent's socket (shared: a poke by
 *    either wakes both, harmless).
 */
#ifndef R2S_POKE_H
#define R2S_POKE_H

#include <stdbool.h>
#include <stdint.h>

/* Registers the poke in epoll set epfd under key. *joined: the poke
 * socket the set holds (0: none), kept by the caller, so that it is
 * registered once, and again if the socket was made anew. */
bool r2s__poke_join(int epfd, uint64_t key, uint64_t *joined);

/* The poke socket now, as r2s__poke_join records it in *joined (0: none
 * made yet), without a system call: a set that joined this one needs no
 * other look. */
uint64_t r2s__poke_id(void);

void r2s__poke_sleep_begin(void);
void r2s__poke_sleep_end(void);

/* Wakes every wait sleeping without a slice. */
void r2s__poke(void);

/* Waits sleeping without a slice now (atomic; see the contract). */
extern int r2s__poke_sleepers;

/* r2s__poke if a link that armed waits (armed > 0) changed and such a
 * wait may be sleeping. */
static inline void r2s__poke_if(int armed)
{
  if (armed > 0 && __atomic_load_n(&r2s__poke_sleepers, __ATOMIC_SEQ_CST) > 0) r2s__poke();
}

#endif

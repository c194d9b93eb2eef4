/*
 * sandbox.h - the application confined its own system calls.
 *
 * Contract:
 *  - r2s__sandbox_enter() runs when the application is about to install a
 *    seccomp filter on itself (prctl(PR_SET_SECCOMP), or seccomp(2)
 *    through syscall(): OpenSSH's pre-authentication child does, with a
 *    list of a few calls and death for any other). It runs before the
 *    filter exists, so it may still make any call.
 *  - From then on r2s__sandboxed() is true in this process and in its fork()
 *    children, and the shim makes no system call the application's own
 *    calls do not need: no statistics segment or file, no thread, no ring,
 *    no close in the background. Connections that have not begun to switch
 *    become plain pass-through here (their reads and writes are the
 *    application's own calls); connections made afterwards stay on TCP.
 *  - Not covered: a peer that switches towards a sandboxed process (it
 *    does so only once R2SOCK_UPGRADE's bytes moved, 64 KiB by default;
 *    OpenSSH's pre-authentication exchange is a few KiB), a connection
 *    already on frames or a ring, and filters inherited at start (a
 *    container's), which allow what ordinary programs do.
 */
#ifndef R2S_SANDBOX_H
#define R2S_SANDBOX_H

#include <stdbool.h>

extern int r2s__sandbox_on;

void r2s__sandbox_enter(void);

static inline bool r2s__sandboxed(void)
{
  return __atomic_load_n(&r2s__sandbox_on, __ATOMIC_RELAXED) != 0;
}

#endif

/*
 * adopt.h - TCP sockets that reach the process ready-made: through exec,
 * or from another process with SCM_RIGHTS.
 *
 * Contract:
 *  - r2s__adopt_inherited() runs once at start-up: every TCP socket open
 *    in the new image is tracked like one of its own. One on which no
 *    byte was ever sent (inetd and sshd hand over a socket just accepted)
 *    may still upgrade here; the others never switch (R2S_LINK_ADOPTED,
 *    link.h).
 *  - r2s__adopt_passed(msg) does the same for the descriptors a receive
 *    call just took from a Unix socket (SCM_RIGHTS in msg's ancillary
 *    data): a connection a server accepted and passed on before moving a
 *    byte (node's cluster, a master process handing connections to its
 *    workers) upgrades in the process that serves it. errno is kept.
 *  - r2s__adopt_given(msg) runs before a send call passes descriptors on:
 *    each connection among them is shared with another process from then
 *    on (R2S_CONN_FORKED, as after fork()), so that this process's close
 *    of its copy ends nothing for the receiver. As after fork, the process
 *    that moves bytes on it owns it again.
 *  - Both take the fd table's and the pool's locks, nothing else; they
 *    make no call that blocks.
 */
#ifndef R2S_ADOPT_H
#define R2S_ADOPT_H

#include <sys/socket.h>

void r2s__adopt_inherited(void);
void r2s__adopt_passed(const struct msghdr *msg);
void r2s__adopt_given(const struct msghdr *msg);

#endif

/*
 * tcphist.h - what the kernel remembers of a TCP socket's past.
 *
 * Contract: r2s__tcp_never_sent(fd) is true only when the kernel says that
 * no byte was ever written on the connected TCP socket fd, by any process
 * that held it (nothing acknowledged by the peer, nothing queued or in
 * flight, no FIN). It asks the kernel, not the shim's own state, so it
 * answers for sockets inherited across exec, whose earlier images' state
 * is gone. False when the kernel cannot say (no TCP_INFO byte counts:
 * Linux before 4.1) or fd is not such a socket: callers then assume the
 * worst. It changes nothing on the socket.
 */
#ifndef R2S_TCPHIST_H
#define R2S_TCPHIST_H

#include <stdbool.h>

bool r2s__tcp_never_sent(int fd);

/* For a reader standing at an urgent mark (SIOCATMARK 1, SO_OOBINLINE
 * off): 1 if the mark is the first byte of the stream, 0 if bytes came
 * before it, -errno if the kernel cannot say (no TCP_INFO byte counts, a
 * reset socket). The reader's own count cannot tell: an urgent byte that
 * comes while the reader stands at an older one makes the kernel step
 * over the older one, unread. It changes nothing on the socket. */
int r2s__tcp_mark_at_start(int fd);

#endif

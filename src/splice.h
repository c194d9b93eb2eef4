/*
 * splice.h - splice(2) from or into a connection whose bytes the shim
 * moves (its link is not pass-through): a proxy that splices between two
 * sockets through a pipe (haproxy's splice-request and splice-response)
 * would otherwise move the kernel's TCP bytes, which are the shim's frames
 * once the peer switched, or nothing while they are in a ring.
 *
 * Contract: as the kernel's splice between a pipe and the TCP socket of
 * connection c (a reference the caller holds).
 *  - r2s__splice_from_conn: from c's socket fd_in into the pipe fd_out;
 *    r2s__splice_into_conn: from the pipe fd_in into c's socket fd_out.
 *  - At most len bytes, and at most what the pipe takes (from) or what the
 *    connection takes (into): no byte leaves one end that the other did
 *    not take. The bytes are looked at first (a peek of the connection, a
 *    tee of the pipe), moved through a pipe of the calling thread's own,
 *    and only what went through is then taken from the source.
 *  - Blocking as the kernel's: the socket's O_NONBLOCK or SPLICE_F_NONBLOCK
 *    for the socket, the pipe's O_NONBLOCK or SPLICE_F_NONBLOCK for the
 *    pipe; SO_RCVTIMEO and SO_SNDTIMEO hold; SPLICE_F_MORE is MSG_MORE.
 *  - The other end not a pipe: -EINVAL; an offset given: -ESPIPE (the
 *    kernel's answers). Returns the bytes moved, 0 at the end of the
 *    stream (from) or of the pipe's writers (into), or -errno.
 *  - Another thread reading the same socket or pipe meanwhile is not
 *    supported (the kernel's splice is one operation; this is three).
 */
#ifndef R2S_SPLICE_H
#define R2S_SPLICE_H

#include <fcntl.h>
#include <sys/types.h>

#include "conn.h"

ssize_t r2s__splice_from_conn(r2s_conn_t *c, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                              unsigned flags);
ssize_t r2s__splice_into_conn(r2s_conn_t *c, int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                              unsigned flags);

#endif

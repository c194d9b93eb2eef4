/*
 * stream.h - TCP socket semantics for a connection whose bytes the shim
 * moves itself (its link is not pass-through).
 *
 * Contract:
 *  - r2s__stream_recv/send behave as recvmsg/sendmsg on the TCP socket
 *    would: blocking unless O_NONBLOCK or MSG_DONTWAIT, SO_RCVTIMEO and
 *    SO_SNDTIMEO (EAGAIN on expiry), MSG_WAITALL, MSG_PEEK, short counts,
 *    0 at end of stream, EPIPE (with SIGPIPE unless MSG_NOSIGNAL) when the
 *    peer is gone, ECONNRESET after a protocol failure.
 *  - Waiting spins for R2SOCK_SPIN_US, then sleeps in poll(2) on the real
 *    fd after asking the peer for a doorbell (r2s__link_arm); internal
 *    sleeps are capped at 100 ms so a lost wake-up costs latency, never a
 *    hang (2 ms, backing off, on a link where another thread was seen to
 *    read a sleeper's doorbell). A signal ends a wait with EINTR, as in
 *    the kernel.
 *  - Return a byte count or -errno; the wrappers set errno. Bytes are
 *    counted per path in the connection.
 */
#ifndef R2S_STREAM_H
#define R2S_STREAM_H

#include <sys/types.h>
#include <sys/uio.h>

#include "conn.h"

ssize_t r2s__stream_recv(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags);
ssize_t r2s__stream_send(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags);

/* send(MSG_OOB): all but the last byte as ordinary data, then the last as
 * urgent data through the kernel (r2s__link_send_oob). */
ssize_t r2s__stream_send_oob(r2s_conn_t *c, int fd, const struct iovec *iov, int cnt, int flags);

#endif

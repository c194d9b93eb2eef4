/*
 * sc_io: one read or one write on a session's socket through a libc entry
 * point picked at random (read/recv/recvfrom/readv/recvmsg, recv with
 * MSG_WAITALL, recv with MSG_PEEK followed by the real read; write/send/
 * sendto/writev/sendmsg with several iovecs), so that every wrapper of a
 * preloaded shim carries verified traffic. With SC_F_ZERO_READS each read
 * comes after a read of no bytes, picked the same way (read, recv, readv
 * and recvmsg with no iovec or empty ones, MSG_PEEK, MSG_DONTWAIT,
 * recvmmsg), which must take no byte and answer as Linux does.
 *
 * Contract: return the byte count, 0 for EOF (reads), -1 with errno set by
 * libc (EAGAIN, EINTR, ...), or SC_IO_BROKEN when a call broke its own
 * contract (peeked bytes differ from read ones, MSG_WAITALL came back short
 * on an open connection, a read of no bytes answered other than 0 or
 * EAGAIN); the message is then in the session's rx_err.
 */
#ifndef SC_IO_H
#define SC_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sc_stream.h"

#define SC_IO_BROKEN (-2)

/* How many bytes to ask for next: random, but never more than the peer will
 * still send (MSG_WAITALL would wait for bytes that never come). When only
 * EOF is left, a few bytes, so that extra bytes from the peer are caught. */
size_t sc_io_read_size(sc_session_t *s);
/* Writes up to n bytes of data. */
ssize_t sc_io_write(sc_session_t *s, const uint8_t *data, size_t n);
/* Reads up to want (>= 1) bytes into s->rxbuf. MSG_WAITALL is only used
 * when blocking, since on a non-blocking socket it means nothing. */
ssize_t sc_io_read(sc_session_t *s, size_t want, bool blocking);

#endif

/*
 * sendfile.h - sendfile(2) into a connection whose bytes the shim moves.
 *
 * Contract: as the kernel's sendfile from in_fd to out_fd (connection c,
 * a reference the caller holds): at most count bytes, from *offset (which
 * then ends where the bytes sent end) or from in_fd's file offset (left
 * at the end of what was sent). Returns the bytes sent, or -errno when
 * none were. The bytes go through the stream (stream.h), so blocking,
 * timeouts and SIGPIPE are the socket's.
 */
#ifndef R2S_SENDFILE_H
#define R2S_SENDFILE_H

#include <sys/types.h>

#include "conn.h"

ssize_t r2s__stream_sendfile(r2s_conn_t *c, int out_fd, int in_fd, off_t *offset, size_t count);

#endif

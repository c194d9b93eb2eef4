/*
 * sockopt.h - socket options on a connection the shim tracks: what the
 * kernel's answer alone would get wrong once the shim carries the bytes.
 *
 * Contract:
 *  - Both behave as setsockopt(2)/getsockopt(2) on fd, whose connection
 *    is c (a reference the caller holds): the same return value (0, or -1
 *    with errno set), the same effect as seen by the application.
 *  - What the shim keeps itself: SO_RCVTIMEO and SO_SNDTIMEO (its blocking
 *    calls honour them), SO_OOBINLINE before the connection exists and
 *    while the peer's hello or switch mark may still be read (the kernel's
 *    flag is the shim's then: link.h), TCP_NODELAY and TCP_CORK while the
 *    shim's frames travel on the socket (link.h), and SO_SNDBUF/SO_RCVBUF,
 *    which the rings honour (transport.h, size_buffers). Everything else
 *    is the kernel's.
 */
#ifndef R2S_SOCKOPT_H
#define R2S_SOCKOPT_H

#include <sys/socket.h>

#include "conn.h"

int r2s__sockopt_set(r2s_conn_t *c, int fd, int level, int name, const void *val, socklen_t len);
int r2s__sockopt_get(r2s_conn_t *c, int fd, int level, int name, void *val, socklen_t *len);

#endif

/*
 * sc_net: sockets for the test programs: listening (IPv4, IPv6 or IPv6
 * dual-stack), connecting (blocking or non-blocking), classifying the peer
 * address, reporting the bound port, and checking that no TCP socket leaked.
 *
 * Contract: functions return a file descriptor or 0 on success and -errno on
 * failure; they never exit. Every socket they create is close-on-exec.
 */
#ifndef SC_NET_H
#define SC_NET_H

#include <stdbool.h>

enum sc_peer_kind { SC_PEER_OTHER, SC_PEER_V4, SC_PEER_V6, SC_PEER_V4MAPPED };

/* Listens on host:port (port 0 picks a free one, returned in *bound_port).
 * With v6_dual the socket is AF_INET6 with IPV6_V6ONLY off, so it accepts
 * IPv4 peers as v4-mapped addresses; host defaults to "::" then, and to
 * "127.0.0.1" otherwise. */
int sc_listen(const char *host, int port, bool v6_dual, int *bound_port);

/* Connects to host:port. With nonblock the socket is O_NONBLOCK and
 * *in_progress says whether the caller must wait for writability and read
 * SO_ERROR (EINPROGRESS). */
int sc_connect(const char *host, int port, bool nonblock, bool *in_progress);

enum sc_peer_kind sc_peer_kind(int fd);
const char *sc_peer_kind_name(enum sc_peer_kind kind);

/* Writes "PORT\n" to fd and closes it: the test scripts block on a FIFO
 * until the server is listening, which needs neither sleeps nor polling. */
int sc_report_port(int fd, int port);

/* Number of open AF_INET/AF_INET6 stream sockets in this process. */
int sc_count_tcp_fds(void);

#endif

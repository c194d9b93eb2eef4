/*
 * path.h - the ways a connection's bytes can go, and why one stayed on TCP.
 *
 * Contract: shared vocabulary of the layers that decide a path (the link,
 * the transports) and those that count and show it (conn.c, statseg.c,
 * stats.h): each path and each reason maps to one statistics counter, so
 * a value is added at the end, never renumbered (r2sock-stat reads them).
 */
#ifndef R2S_PATH_H
#define R2S_PATH_H

typedef enum { R2S_PATH_TCP = 0, R2S_PATH_SHM = 1, R2S_PATH_RDMA = 2, R2S_PATH_COUNT } r2s_path_t;

/* Why a connection stayed on TCP; each maps to one stats counter. */
typedef enum {
  R2S_REASON_NONE = 0,
  R2S_REASON_DISABLED,     /* R2SOCK_UPGRADE=never, a denied port or program */
  R2S_REASON_PEER_PLAIN,   /* the peer sent no hello */
  R2S_REASON_NO_PEER_YET,  /* ended before anything came from the peer */
  R2S_REASON_UNFINISHED,   /* both shims, ended before the switch completed */
  R2S_REASON_NO_RESOURCES, /* no ring could be made or mapped */
  R2S_REASON_UNREACHABLE,  /* the peer is on another host and no transport reaches it */
  R2S_REASON_APP_OOB,      /* the application uses urgent data */
  R2S_REASON_FAILED,       /* a protocol error reset it */
  R2S_REASON_NO_HELLO,     /* the hello could not be sent */
  R2S_REASON_INHERITED,    /* inherited across exec: the protocol state stayed behind */
  R2S_REASON_OTHER_USER,   /* the peer runs as another user: no shared memory */
  R2S_REASON_NO_DEVICE,    /* a remote peer, and no RDMA device serves the connection's address */
  R2S_REASON_SHORT,        /* both shims, ended before moving R2SOCK_UPGRADE's bytes */
  R2S_REASON_SANDBOXED,    /* the process confined its system calls (sandbox.h) */
  R2S_REASON_RULE,         /* a rule of the rules file says upgrade=never (rules.h) */
  R2S_REASON_FASTOPEN,     /* TCP_FASTOPEN_CONNECT: its first bytes may leave before a hello could */
  R2S_REASON_ZEROCOPY,     /* SO_ZEROCOPY: its sends are acknowledged by the kernel's TCP */
  R2S_REASON_COUNT
} r2s_reason_t;

#endif

/*
 * lingerer.h - what keeps our closed sockets in order after the process
 * has exited.
 *
 * Contract:
 *  - The problem: after exit the kernel keeps a closed TCP socket and goes
 *    on sending what is queued, as long as the peer reads. But a shim peer
 *    may still send frames (its hello, switch mark, handshake) when it
 *    reads our hello late; bytes reaching a socket nobody holds make our
 *    kernel answer with a reset, and the reset discards the tail of our
 *    stream that was still queued. Plain TCP would have delivered it.
 *  - r2s__lingerer_start(fds, n) hands the n sockets (the reaper's
 *    duplicates, see reaper.h) to a new detached process, the lingerer,
 *    which holds only those fds, reads and drops what arrives on each until
 *    the peer's end of stream or an error, or until the socket made no
 *    progress (nothing received, our send queue did not shrink) for the
 *    kernel's own tcp_fin_timeout (60 s by default: how long the kernel
 *    keeps an orphan in FIN_WAIT2), and ends after 10 such periods at most.
 *  - Made for the exiting, possibly multi-threaded process: the lingerer is
 *    made with bare clone system calls (no fork handlers run), does nothing
 *    but bare system calls (no libc locks, no destructors, no statistics,
 *    no shared-memory or segment cleanup), and is reparented to init
 *    through an intermediate child that the caller reaps at once: no
 *    SIGCHLD reaches the application and its wait() never sees it. It has
 *    its own session, no terminal, none of the application's signal
 *    handlers, and no other fd (stdin, stdout and stderr closed, so a pipe
 *    reader or `$(app)` does not wait for it). Its name is "r2s-linger".
 *  - Returns 0 once the lingerer runs, or -errno (then nothing was made).
 *    The caller keeps its own fds either way.
 */
#ifndef R2S_LINGERER_H
#define R2S_LINGERER_H

int r2s__lingerer_start(const int *fds, int n);

/* How long a socket whose send queue stopped moving is kept, in
 * nanoseconds: R2SOCK_LINGER, or else the kernel's bound for an orphan
 * waiting on its peer (tcp_fin_timeout; 60 s if it cannot be read). */
long long r2s__lingerer_bound_ns(void);

#endif

/*
 * reaper.h - orderly close of sockets that carried shim frames.
 *
 * Contract:
 *  - A shim peer may send frames (its handshake, doorbells) at any time,
 *    even after our application closed. Bytes that reach a closed socket
 *    make the kernel answer with a reset, which can cost the peer the end of
 *    our stream, or at least turn its clean end of stream into ECONNRESET.
 *  - r2s__reaper_adopt(fd) takes over a socket the application is closing:
 *    it keeps a duplicate of it (above fd 512, close-on-exec), sends our
 *    FIN, and reads whatever arrives until the peer's FIN or an error:
 *    the shim's frames are dropped, and an application byte resets the
 *    socket, as the kernel does for bytes that reach a closed socket. Short of that it keeps the socket while our send queue
 *    (SIOCOUTQ) still moves, since a reset would discard it; gives it up
 *    once the queue stood still for the kernel's tcp_fin_timeout, or 2 s
 *    after it emptied. Then it closes the duplicate. The application's
 *    close() returns at once.
 *  - The duplicate's number can be taken back by the application (closefrom,
 *    close_range, then a file of its own): each use first checks that it is
 *    still the same socket (by inode), and an entry whose number is no
 *    longer ours is forgotten, never read from nor closed.
 *  - One background thread, started on first use. In a fork() child the
 *    duplicates are closed (they are the parent's business).
 *  - Returns 0, or -errno if it could not take the socket (the caller then
 *    closes it as usual).
 */
#ifndef R2S_REAPER_H
#define R2S_REAPER_H

#include <sys/types.h>

/* How the reaper reads a socket whose peer may still send the shim's
 * frames (the link's state goes on with it): read() returns > 0 when an
 * application byte of the peer's arrived after the close (the socket is
 * then reset, as TCP answers bytes that reach a closed socket), 0 at the
 * end of the stream or an error, -EAGAIN while nothing more can be told.
 * release() once the socket is done with, outside the reaper's lock: from
 * the reaper's thread, or from the exiting thread for the sockets it
 * finishes itself (r2s__reaper_exit). With no reader, every byte is
 * dropped. */
typedef struct r2s_reap_reader_s {
  ssize_t (*read)(void *arg, int fd);
  void (*release)(void *arg);
  void *arg;
} r2s_reap_reader_t;

/* rd may be NULL; when adopt fails, rd->release is not called. */
int r2s__reaper_adopt(int fd, const r2s_reap_reader_t *rd);
void r2s__reaper_fork_child(void);

/* At exit: gives the sockets being finished up to ms milliseconds, then
 * hands those whose peer is not done yet to a lingerer (lingerer.h), so the
 * process's end does not turn their orderly close into resets. */
void r2s__reaper_exit(int ms);

#endif

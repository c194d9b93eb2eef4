/*
 * shm_fd.h - a shared-memory ring handed to the peer as a file descriptor.
 *
 * Contract:
 *  - For a peer that cannot open our ring by name (it runs as another user
 *    and the segment is 0600, or it has a /dev/shm of its own), the ring
 *    moves into a sealed memfd (r2s__shm_fd_ring): its size can neither
 *    shrink nor grow and its seals cannot change (F_SEAL_SHRINK,
 *    F_SEAL_GROW, F_SEAL_SEAL), so no end can be made to fault on a page
 *    the other took away (SIGBUS). A taker maps only a descriptor that
 *    passes r2s__shm_fd_check.
 *  - The taker listens on an abstract Unix socket that the kernel names
 *    (r2s__shm_fd_listen) and sends its address to the owner over the
 *    connection's own TCP stream (FETCH). The owner connects, sends a
 *    nonce of its own with the memfd in one message (r2s__shm_fd_send),
 *    then the nonce over TCP (HANDED). The taker takes the message that
 *    carries it (r2s__shm_fd_take): only the owner and the taker know it,
 *    so a process that connects to the taker's socket first cannot slip
 *    it a ring of its own.
 *  - The owner connects only to abstract addresses and sends nothing the
 *    peer chose: a peer that names another program's socket makes that
 *    program receive 16 random bytes and a descriptor of a ring the peer
 *    could have had anyway.
 *  - Every call is non-blocking and leaves no descriptor behind on
 *    failure; they return -errno. The Unix socket calls go to libc's own
 *    functions (r2s__libc), never the shim's wrappers.
 */
#ifndef R2S_SHM_FD_H
#define R2S_SHM_FD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../frame.h"

/* A sealed memfd of `bytes`, its first `reserve` bytes allocated
 * (fallocate: no room is an error now, never a SIGBUS later). */
int r2s__shm_fd_ring(size_t bytes, size_t reserve);

/* 0 if fd is a memfd of exactly `bytes` whose size and seals are fixed
 * and that may be mapped for writing; -EPROTO otherwise. */
int r2s__shm_fd_check(int fd, size_t bytes);

/* A listening socket for one ring; *addr gets its address, *ino the
 * socket's inode. The descriptor outlives the call, so the application may
 * close it under us (closefrom, close_range) and reuse its number: every
 * later use checks that it is still this socket. */
int r2s__shm_fd_listen(r2s_fetch_t *addr, ino_t *ino);

/* Closes the listener if fd is still the socket of inode ino. */
void r2s__shm_fd_unlisten(int fd, ino_t ino);

/* Sends ring_fd to the taker listening at *to, with a fresh nonce, which
 * it stores in nonce (for the HANDED frame). */
int r2s__shm_fd_send(const r2s_fetch_t *to, int ring_fd, uint8_t nonce[R2S_NONCE_LEN]);

/* The ring descriptor that came with `nonce` on the listener (of inode
 * ino: -EBADF if fd is no longer it), looking at a bounded number of
 * connections; -ENOMSG if none carried it. */
int r2s__shm_fd_take(int listener, ino_t ino, const uint8_t nonce[R2S_NONCE_LEN]);

#endif

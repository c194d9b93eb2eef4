/*
 * libc.h - the saved libc entry points.
 *
 * Contract:
 *  - r2s__libc holds the next definition (RTLD_NEXT) of every function the
 *    preload module interposes. It is filled by r2s__libc_load(), which is
 *    idempotent and safe to race: every thread that calls it stores the same
 *    values. Readers use r2s__libc.<name> directly.
 *  - Every internal I/O of the shim (logging, stats files, the real socket
 *    calls) goes through this table, never through the public names, so the
 *    shim never re-enters its own wrappers.
 *  - r2s__in_shim is a thread-local depth counter: non-zero while the shim
 *    itself runs code that may call back into the wrappers (start-up, the
 *    libraries a transport calls, the shim's own threads). The wrappers
 *    then pass every call straight to this table, so the shim never
 *    recurses into itself.
 *  - Functions marked OPT may be absent from the running libc (older glibc);
 *    their pointer is then NULL and the wrapper reports ENOSYS, exactly as a
 *    libc without the symbol would have failed to link.
 */
#ifndef R2S_LIBC_H
#define R2S_LIBC_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* X(name, return type, parameter list, required) */
#define R2S_LIBC_FUNCS(X)                                                                                    \
  X(socket, int, (int, int, int), 1)                                                                         \
  X(connect, int, (int, const struct sockaddr *, socklen_t), 1)                                              \
  X(accept, int, (int, struct sockaddr *, socklen_t *), 1)                                                   \
  X(accept4, int, (int, struct sockaddr *, socklen_t *, int), 1)                                             \
  X(bind, int, (int, const struct sockaddr *, socklen_t), 1)                                                 \
  X(listen, int, (int, int), 1)                                                                              \
  X(close, int, (int), 1)                                                                                    \
  X(shutdown, int, (int, int), 1)                                                                            \
  X(dup, int, (int), 1)                                                                                      \
  X(dup2, int, (int, int), 1)                                                                                \
  X(dup3, int, (int, int, int), 1)                                                                           \
  X(fcntl, int, (int, int, ...), 1)                                                                          \
  X(fcntl64, int, (int, int, ...), 0)                                                                        \
  X(ioctl, int, (int, unsigned long, ...), 1)                                                                \
  X(setsockopt, int, (int, int, int, const void *, socklen_t), 1)                                            \
  X(getsockopt, int, (int, int, int, void *, socklen_t *), 1)                                                \
  X(getsockname, int, (int, struct sockaddr *, socklen_t *), 1)                                              \
  X(getpeername, int, (int, struct sockaddr *, socklen_t *), 1)                                              \
  X(read, ssize_t, (int, void *, size_t), 1)                                                                 \
  X(write, ssize_t, (int, const void *, size_t), 1)                                                          \
  X(readv, ssize_t, (int, const struct iovec *, int), 1)                                                     \
  X(writev, ssize_t, (int, const struct iovec *, int), 1)                                                    \
  X(send, ssize_t, (int, const void *, size_t, int), 1)                                                      \
  X(sendto, ssize_t, (int, const void *, size_t, int, const struct sockaddr *, socklen_t), 1)                \
  X(sendmsg, ssize_t, (int, const struct msghdr *, int), 1)                                                  \
  X(sendmmsg, int, (int, struct mmsghdr *, unsigned int, int), 1)                                            \
  X(recv, ssize_t, (int, void *, size_t, int), 1)                                                            \
  X(recvfrom, ssize_t, (int, void *, size_t, int, struct sockaddr *, socklen_t *), 1)                        \
  X(recvmsg, ssize_t, (int, struct msghdr *, int), 1)                                                        \
  X(recvmmsg, int, (int, struct mmsghdr *, unsigned int, int, struct timespec *), 1)                         \
  X(sendfile, ssize_t, (int, int, off_t *, size_t), 1)                                                       \
  X(sendfile64, ssize_t, (int, int, off_t *, size_t), 0)                                                     \
  X(splice, ssize_t, (int, loff_t *, int, loff_t *, size_t, unsigned int), 1)                               \
  X(poll, int, (struct pollfd *, nfds_t, int), 1)                                                            \
  X(ppoll, int, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *), 1)                     \
  X(select, int, (int, fd_set *, fd_set *, fd_set *, struct timeval *), 1)                                   \
  X(pselect, int, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *), 1)         \
  X(epoll_create, int, (int), 1)                                                                             \
  X(epoll_create1, int, (int), 1)                                                                            \
  X(epoll_ctl, int, (int, int, int, struct epoll_event *), 1)                                                \
  X(epoll_wait, int, (int, struct epoll_event *, int, int), 1)                                               \
  X(epoll_pwait, int, (int, struct epoll_event *, int, int, const sigset_t *), 1)                            \
  X(epoll_pwait2, int, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *), 0)       \
  X(fork, pid_t, (void), 1)                                                                                  \
  X(close_range, int, (unsigned int, unsigned int, int), 0)                                                  \
  X(closefrom, void, (int), 0)                                                                               \
  X(prctl, int, (int, ...), 1)                                                                               \
  X(syscall, long, (long, ...), 1)

typedef struct r2s_libc_s {
#define R2S_LIBC_FIELD(name, ret, params, required) ret(*name) params;
  R2S_LIBC_FUNCS(R2S_LIBC_FIELD)
#undef R2S_LIBC_FIELD
} r2s_libc_t;

extern r2s_libc_t r2s__libc;
extern __thread int r2s__in_shim;

/* Resolves every entry; returns 0, or -ENOSYS if a required one is missing
 * (the name is logged). Safe to call from several threads at once. */
int r2s__libc_load(void);

/* syscall(2) for the shim's own bare calls: libc's, never the exported
 * syscall() (preload/syscall.c), which hands some numbers to the wrappers
 * for the application. Usable before r2s__libc_load() and in the
 * lingerer's copies (lingerer.c): it takes no lock. */
typedef long (*r2s_syscall_fn_t)(long, ...);
r2s_syscall_fn_t r2s__syscall_fn(void);
/* A macro, so that the arguments go to libc's function as the caller
 * wrote them (a variadic forwarder would read six, past those given). */
#define r2s__syscall(...) (r2s__syscall_fn()(__VA_ARGS__))

/* a, b and c on stderr, by a bare system call: for the messages that
 * cannot go through the table (a missing entry, a check of it). */
void r2s__say_raw(const char *a, const char *b, const char *c);

/* open(2) for the shim's own files, as a bare system call: the shim closes
 * them with r2s__libc.close (the next definition, past any sanitizer's
 * interceptor), so it must open them past it too, or a sanitizer that
 * tracks descriptors sees an fd it never saw closed reused by another
 * thread and reports a race (TSan did, in unit.early_ctor). */
int r2s__open_raw(const char *path, int flags, unsigned mode);
/* The first len - 1 bytes of a small file (/proc) so opened, read once
 * and NUL-terminated in buf: their count, or -1 if unreadable or empty. */
ssize_t r2s__read_small_raw(const char *path, char *buf, size_t len);
/* mmap(2) of such a file, for the same reason (a sanitizer's mmap
 * interceptor also records the descriptor). */
void *r2s__mmap_fd_raw(size_t len, int fd);
/* The same over the mapping at `at`, replaced in one step (MAP_FIXED). */
void *r2s__mmap_fd_over_raw(void *at, size_t len, int fd);
/* fstat(2) of such a file, for the same reason (TSan's fstat interceptor
 * records a read of the descriptor; unit.early_ctor saw the report when a
 * thread's dup() reused a shared-memory segment's fd the shim had closed). */
int r2s__fstat_raw(int fd, struct stat *sb);

/* A descriptor the shim keeps past the application's calls (at 512 and up:
 * the RDMA transport's duplicate, the reaper's; a taker's listener) can be
 * closed under it by an application that closes what it never opened
 * (closefrom, close_range, dup2 onto the number) and then be the number of
 * a file of the application's. So the shim records the socket's inode when
 * it makes the descriptor (r2s__sock_ino: 0, or -errno) and checks it
 * before every use (r2s__still_sock): it never reads from, writes to,
 * shuts down or closes one of the application's files. */
int r2s__sock_ino(int fd, ino_t *ino);
bool r2s__still_sock(int fd, ino_t ino);
/* Such a descriptor: a close-on-exec duplicate of fd at 512 or above,
 * with its inode in *ino; -errno if either fails (nothing is left open).
 * fd itself stays open. */
int r2s__keep_fd(int fd, ino_t *ino);

/* getsockopt(SOL_SOCKET, name) as an int, or -1. */
int r2s__sockopt_int(int fd, int name);

#endif

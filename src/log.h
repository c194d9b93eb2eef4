/*
 * log.h - the shim's messages.
 *
 * Contract:
 *  - Quiet by default: only R2S_LOG_WARN and worse print unless R2SOCK_LOG or
 *    R2SOCK_VERBOSE says otherwise, and normal operation never warns.
 *  - Every line starts with "r2sock[PID]: ", is formatted into a stack buffer
 *    (no allocation) and leaves with one write(2) on stderr through the saved
 *    libc pointer, so lines from several processes do not interleave.
 *  - errno is preserved.
 *  - r2s__log_level is read on every call site before formatting, so a
 *    disabled level costs one load and a branch.
 */
#ifndef R2S_LOG_H
#define R2S_LOG_H

#include <stddef.h>

enum { R2S_LOG_ERROR = 0, R2S_LOG_WARN = 1, R2S_LOG_INFO = 2, R2S_LOG_DEBUG = 3 };

extern int r2s__log_level;

void r2s__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define R2S_LOG(level, ...)                                                                                  \
  do {                                                                                                       \
    if ((level) <= r2s__log_level) r2s__log_write((level), __VA_ARGS__);                                     \
  } while (0)
#define r2s__error(...) R2S_LOG(R2S_LOG_ERROR, __VA_ARGS__)
#define r2s__warn(...)  R2S_LOG(R2S_LOG_WARN, __VA_ARGS__)
#define r2s__info(...)  R2S_LOG(R2S_LOG_INFO, __VA_ARGS__)
#define r2s__debug(...) R2S_LOG(R2S_LOG_DEBUG, __VA_ARGS__)

/* Writes all of buf to fd with the saved libc write, retrying on EINTR and
 * short writes; returns 0 or -errno. Used by the log and the stats printer. */
int r2s__write_all(int fd, const char *buf, size_t len);

#endif

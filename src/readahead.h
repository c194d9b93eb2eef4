/*
 * readahead.h - application bytes a link took off the socket ahead of the
 * application, so that a sender waiting for the peer's control frames can
 * reach them (docs/protocol.md, "Application bytes in front of control
 * frames").
 *
 * Contract:
 *  - A bounded FIFO of bytes (R2S_READAHEAD_MAX). Its bytes come before
 *    every byte still in the socket or the ring: whoever fills it must only
 *    append the next bytes of the stream, and every read of the stream must
 *    take from it first.
 *  - The owner serialises fill and take (the link's rx_lock). len() alone
 *    may be read without it (poll), as an atomic load: a stale answer is one
 *    a lock taken a moment earlier would have given.
 *  - Memory is taken on the first fill and given back when the buffer
 *    empties, so an idle connection costs nothing.
 */
#ifndef R2S_READAHEAD_H
#define R2S_READAHEAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define R2S_READAHEAD_MAX (64u << 10)

typedef struct r2s_readahead_s {
  uint8_t *buf;
  uint32_t off; /* first unread byte */
  uint32_t len; /* unread bytes (atomic for len()) */
} r2s_readahead_t;

static inline size_t r2s__readahead_len(const r2s_readahead_t *ra)
{
  return __atomic_load_n(&ra->len, __ATOMIC_ACQUIRE);
}

/* Where the next bytes of the stream go, and how many fit (*room); NULL
 * when the buffer is full or no memory can be had. */
uint8_t *r2s__readahead_room(r2s_readahead_t *ra, size_t *room);

/* n bytes were written at the place room() gave. */
void r2s__readahead_commit(r2s_readahead_t *ra, size_t n);

/* Copies up to the iovec's size of the oldest bytes into it and, unless
 * peek, drops them. Returns the count (0 when empty). */
size_t r2s__readahead_take(r2s_readahead_t *ra, const struct iovec *iov, int cnt, int peek);

void r2s__readahead_free(r2s_readahead_t *ra);

#endif

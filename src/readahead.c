/* The bounded buffer of application bytes read ahead of the application
 * (readahead.h). */
#include "readahead.h"

#include <stdlib.h>
#include <string.h>

uint8_t *r2s__readahead_room(r2s_readahead_t *ra, size_t *room)
{
  if (!ra->buf && !(ra->buf = malloc(R2S_READAHEAD_MAX))) return NULL;
  if (ra->off && ra->off + ra->len == R2S_READAHEAD_MAX) {
    /* Taken bytes at the front: make them room again. */
    memmove(ra->buf, ra->buf + ra->off, ra->len);
    ra->off = 0;
  }
  size_t end = (size_t)ra->off + ra->len;
  if (end >= R2S_READAHEAD_MAX) return NULL;
  *room = R2S_READAHEAD_MAX - end;
  return ra->buf + end;
}

void r2s__readahead_commit(r2s_readahead_t *ra, size_t n)
{
  __atomic_store_n(&ra->len, ra->len + (uint32_t)n, __ATOMIC_RELEASE);
}

size_t r2s__readahead_take(r2s_readahead_t *ra, const struct iovec *iov, int cnt, int peek)
{
  size_t done = 0;
  for (int i = 0; i < cnt && done < ra->len; i++) {
    size_t k = ra->len - done < iov[i].iov_len ? ra->len - done : iov[i].iov_len;
    memcpy(iov[i].iov_base, ra->buf + ra->off + done, k);
    done += k;
  }
  if (peek || !done) return done;
  ra->off += (uint32_t)done;
  __atomic_store_n(&ra->len, ra->len - (uint32_t)done, __ATOMIC_RELEASE);
  if (ra->len == 0) r2s__readahead_free(ra);
  return done;
}

void r2s__readahead_free(r2s_readahead_t *ra)
{
  free(ra->buf);
  ra->buf = NULL;
  ra->off = 0;
  __atomic_store_n(&ra->len, 0, __ATOMIC_RELEASE);
}

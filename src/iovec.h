/*
 * iovec.h - the two walks over a caller's iovec that the stream and the
 * link both need.
 *
 * Contract:
 *  - r2s__iov_total(): the bytes the iovec describes.
 *  - r2s__iov_advance(): out[] gets the iovec's entries past its first
 *    `skip` bytes (the first one cut), at most `max` entries; returns how
 *    many. A short read or write is always allowed, so a caller with a
 *    longer iovec simply moves fewer bytes this time.
 */
#ifndef R2S_IOVEC_H
#define R2S_IOVEC_H

#include <stddef.h>
#include <sys/uio.h>

static inline size_t r2s__iov_total(const struct iovec *iov, int cnt)
{
  size_t t = 0;
  for (int i = 0; i < cnt; i++) t += iov[i].iov_len;
  return t;
}

static inline int r2s__iov_advance(struct iovec *out, int max, const struct iovec *iov, int cnt, size_t skip)
{
  int k = 0;
  for (int i = 0; i < cnt && k < max; i++) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    out[k].iov_base = (char *)iov[i].iov_base + skip;
    out[k].iov_len = iov[i].iov_len - skip;
    skip = 0;
    k++;
  }
  return k;
}

#endif

/* bench-memcpy: the raw limit of a shared-memory transport, i.e. how fast one
 * core can copy messages of a given size into a ring of the shim's size.
 *
 *   usage: bench-memcpy RING_BYTES SECONDS SIZE...
 *   prints one line per SIZE: "SIZE GBIT_PER_S"
 *
 * The shim moves every byte twice (the writer into the ring, the reader out
 * of it), on two cores at once; one copy stream is therefore the ceiling of
 * the shared-memory path's throughput, not a figure it can reach. The ring
 * is as large as the shim's, so that what stays in cache there stays in
 * cache here. Built and run by scripts/bench-same-host; not part of the
 * library. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_size(const char *s, size_t *out)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0) return -1;
  *out = (size_t)v;
  return 0;
}

/* Copy SIZE-byte messages into the ring, wrapping as the shim does, for at
 * least SECS seconds; the clock is read once per batch so that it does not
 * weigh on small messages. */
static double copy_rate(unsigned char *ring, size_t ring_len, const unsigned char *src, size_t size,
                        double secs)
{
  size_t off = 0;
  unsigned long long bytes = 0;
  double t0 = now(), t;
  do {
    for (int batch = 0; batch < 256; batch++) {
      size_t left = size, from = 0;
      while (left) {
        size_t n = ring_len - off < left ? ring_len - off : left;
        memcpy(ring + off, src + from, n);
        from += n;
        left -= n;
        off = (off + n) % ring_len;
      }
      /* The ring is read by nobody: keep the copies. */
      __asm__ volatile("" : : "r"(ring) : "memory");
      bytes += size;
    }
    t = now();
  } while (t - t0 < secs);
  return (double)bytes * 8 / (t - t0) / 1e9;
}

int main(int argc, char **argv)
{
  size_t ring_len, size, max = 0;
  char *end;
  if (argc < 4 || parse_size(argv[1], &ring_len)) {
    fprintf(stderr, "usage: bench-memcpy RING_BYTES SECONDS SIZE...\n");
    return 2;
  }
  double secs = strtod(argv[2], &end);
  if (end == argv[2] || *end || !(secs > 0)) {
    fprintf(stderr, "bench-memcpy: bad SECONDS '%s'\n", argv[2]);
    return 2;
  }
  for (int i = 3; i < argc; i++) {
    if (parse_size(argv[i], &size)) {
      fprintf(stderr, "bench-memcpy: bad SIZE '%s'\n", argv[i]);
      return 2;
    }
    if (size > max) max = size;
  }
  unsigned char *ring = malloc(ring_len), *src = malloc(max);
  if (!ring || !src) {
    fprintf(stderr, "bench-memcpy: out of memory\n");
    return 1;
  }
  /* Touch every page first: page faults are not part of the limit. */
  memset(ring, 1, ring_len);
  memset(src, 2, max);
  for (int i = 3; i < argc; i++) {
    parse_size(argv[i], &size);
    printf("%zu %.2f\n", size, copy_rate(ring, ring_len, src, size, secs));
  }
  free(ring);
  free(src);
  return 0;
}

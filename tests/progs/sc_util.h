/*
 * sc_util: process-level helpers shared by the test programs in tests/progs.
 *
 * Contract: exit codes are the SC_EXIT_* values below (77 means "skipped, a
 * capability is missing", as CTest's SKIP_RETURN_CODE expects); the watchdog
 * turns any hang into a loud failure; the PRNG is splitmix64, so every
 * sequence is a pure function of its seed and runs are reproducible.
 */
#ifndef SC_UTIL_H
#define SC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdnoreturn.h>

enum {
  SC_EXIT_OK = 0,
  SC_EXIT_FAIL = 1,
  SC_EXIT_USAGE = 2,
  SC_EXIT_TIMEOUT = 3,
  SC_EXIT_SKIP = 77,
};

/* Largest single read or write the programs ask for. */
#define SC_CHUNK_MAX ((size_t)256 * 1024)

/* Arms alarm(seconds); when it fires the process prints who timed out and
 * exits with SC_EXIT_TIMEOUT, so a stuck shim fails the test instead of
 * hanging it. Ignores SIGPIPE too: a dead peer must show up as EPIPE. */
void sc_watchdog(const char *who, unsigned seconds);

/* Parses a decimal count with an optional K, M or G (binary) suffix. */
int sc_parse_size(const char *text, uint64_t *out);
int sc_parse_int(const char *text, long min, long max, long *out);

noreturn void sc_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* splitmix64 finaliser: a bijective mix of one 64-bit word. */
static inline uint64_t sc_mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static inline uint64_t sc_rand(uint64_t *state)
{
  *state += 0x9e3779b97f4a7c15ull;
  return sc_mix64(*state);
}

static inline uint64_t sc_rand_below(uint64_t *state, uint64_t bound)
{
  return bound ? sc_rand(state) % bound : 0;
}

/* A size in [1, SC_CHUNK_MAX], log-uniform so that one-byte operations are
 * as common as 256 KiB ones: both ends of the range find different bugs. */
static inline size_t sc_rand_size(uint64_t *state)
{
  unsigned shift = (unsigned)sc_rand_below(state, 19); /* 2^18 = 256 KiB */
  return 1 + (size_t)sc_rand_below(state, (uint64_t)1 << shift);
}

#endif

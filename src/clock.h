/*
 * clock.h - the one clock the shim's waits use.
 *
 * Contract: r2s__now_ns() is CLOCK_MONOTONIC in nanoseconds (through the
 * vDSO: no system call). Deadlines, spin budgets and linger limits are all
 * measured with it. r2s__timespec(ns) is a relative timeout of ns
 * nanoseconds in the form ppoll and epoll_pwait2 take. r2s__order_stamp()
 * orders events across processes and is no clock.
 */
#ifndef R2S_CLOCK_H
#define R2S_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t r2s__now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A count that grows with time and reads alike on every CPU of the host,
 * for ordering events of several processes (ring.h's filled_at), not for
 * measuring: the time-stamp counter where it is one instruction (x86-64's
 * invariant TSC, arm64's virtual counter), CLOCK_MONOTONIC elsewhere. */
static inline uint64_t r2s__order_stamp(void)
{
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return (uint64_t)r2s__now_ns();
#endif
}

static inline struct timespec r2s__timespec(int64_t ns)
{
  return (struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

#endif

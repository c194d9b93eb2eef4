/*
 * clock.h - the one clock the shim's waits use.
 *
 * Contract: r2s__now_ns() is CLOCK_MONOTONIC in nanoseconds (through the
 * vDSO: no system call). Deadlines, spin budgets and linger limits are all
 * measured with it. r2s__timespec(ns) is a relative timeout of ns
 * nanoseconds in the form ppoll and epoll_pwait2 take.
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

static inline struct timespec r2s__timespec(int64_t ns)
{
  return (struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

#endif

/*
 * cpu_busy.h - whether the CPUs this process may run on are contended:
 * more threads want to run than there are CPUs, as the kernel reports it.
 *
 * Contract:
 *  - r2s__cpus_contended() is true when tasks waited for a CPU for at
 *    least R2S_CPU_PRESSURE_PCT % of the last ten seconds
 *    (/proc/pressure/cpu, "some avg10"), or when, at the call, more than
 *    twice as many threads are runnable on the host as this process has
 *    CPUs (/proc/loadavg's fourth field, which counts the caller; the
 *    pressure is updated every two seconds). Twice: the two ends of a
 *    busy connection, the caller and a script around them are runnable
 *    together on free CPUs too. A snapshot, not a forecast: a caller
 *    sizes something for the conditions it starts in.
 *  - Unreadable files (no /proc, a sandbox) count as not contended. Raw
 *    libc calls: safe inside the shim. Costs a few system calls: for
 *    decisions made once per connection, not per message.
 */
#ifndef R2S_CPU_BUSY_H
#define R2S_CPU_BUSY_H

#include <stdbool.h>

#define R2S_CPU_PRESSURE_PCT 10.0

bool r2s__cpus_contended(void);

#endif

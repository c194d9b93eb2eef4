/* Whether the CPUs are contended (cpu_busy.h). */
#include "cpu_busy.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libc.h"

/* The CPUs this process may run on (at least 1). */
static int usable_cpus(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

/* "0.52 0.58 0.59 3/254 12345": runnable threads (the caller among them)
 * over all of them. */
static bool runnable_over_twice_cpus(void)
{
  char buf[128];
  if (r2s__read_small_raw("/proc/loadavg", buf, sizeof buf) < 0) return false;
  double a1, a5, a15;
  int running = 0, total = 0;
  if (sscanf(buf, "%lf %lf %lf %d/%d", &a1, &a5, &a15, &running, &total) != 5) return false;
  return running > 2 * usable_cpus();
}

/* "some avg10=12.34 avg60=... total=...": the share of the last ten
 * seconds in which some task waited for a CPU. */
static bool pressure_high(void)
{
  char buf[256];
  if (r2s__read_small_raw("/proc/pressure/cpu", buf, sizeof buf) < 0) return false;
  const char *p = strstr(buf, "some avg10=");
  return p && strtod(p + strlen("some avg10="), NULL) >= R2S_CPU_PRESSURE_PCT;
}

bool r2s__cpus_contended(void)
{
  return pressure_high() || runnable_over_twice_cpus();
}

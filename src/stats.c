/* Process-wide counters and their one-line printed form. */
#include "stats.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

r2s_stats_t r2s__stats;
r2s_stats_t *r2s__stats_live = &r2s__stats;

static const char *const stat_names[R2S_STAT_COUNT] = {
#define R2S_STAT_NAME(name, doc) #name,
    R2S_STATS(R2S_STAT_NAME)
#undef R2S_STAT_NAME
};

const char *r2s__stat_name(r2s_stat_id_t id)
{
  return (unsigned)id < R2S_STAT_COUNT ? stat_names[id] : "?";
}

void r2s__stats_snapshot(r2s_stats_t *out)
{
  r2s_stats_t *live = __atomic_load_n(&r2s__stats_live, __ATOMIC_ACQUIRE);
  for (int i = 0; i < R2S_STAT_COUNT; i++) {
    out->v[i] = __atomic_load_n(&r2s__stats.v[i], __ATOMIC_RELAXED);
    if (live != &r2s__stats) out->v[i] += __atomic_load_n(&live->v[i], __ATOMIC_RELAXED);
  }
}

void r2s__stats_move(r2s_stats_t *to)
{
  __atomic_store_n(&r2s__stats_live, to, __ATOMIC_RELEASE);
  for (int i = 0; i < R2S_STAT_COUNT; i++)
    __atomic_fetch_add(&to->v[i], __atomic_exchange_n(&r2s__stats.v[i], 0, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

void r2s__stats_reset(void)
{
  __atomic_store_n(&r2s__stats_live, &r2s__stats, __ATOMIC_RELEASE);
  for (int i = 0; i < R2S_STAT_COUNT; i++) __atomic_store_n(&r2s__stats.v[i], 0, __ATOMIC_RELAXED);
}

size_t r2s__stats_format(const r2s_stats_t *s, char *buf, size_t len)
{
  size_t n = (size_t)snprintf(buf, len, "r2sock[%d] stats:", (int)getpid());
  for (int i = 0; i < R2S_STAT_COUNT && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, " %s=%llu", stat_names[i], (unsigned long long)s->v[i]);
  if (n >= len - 1) n = len - 2;
  buf[n++] = '\n';
  buf[n] = '\0';
  return n;
}

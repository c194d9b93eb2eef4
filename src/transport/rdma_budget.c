/* The process's budget of registered memory for RDMA (rdma_budget.h): one
 * atomic count of the bytes reserved, against a budget worked out once
 * from R2SOCK_RDMA_MEMORY and the memlock limit, shown as the gauge
 * rdma_memory_bytes_now (stats.h). */
#include "rdma_budget.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "../libc.h"
#include "../log.h"
#include "../options.h"
#include "../stats.h"

static uint64_t reserved; /* atomic */
static uint64_t budget;   /* set once (budget_once) */
static pthread_once_t budget_once = PTHREAD_ONCE_INIT;

bool r2s__rdma_pin_unlimited(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY) return true;
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
  if (r2s__syscall(SYS_capget, &h, d) != 0) return false;
  return (d[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1u;
}

/* A fork child has registered nothing: the parent's regions stay the
 * parent's (its counters, the gauge among them, start from 0 too). */
static void fork_child(void)
{
  __atomic_store_n(&reserved, 0, __ATOMIC_RELAXED);
}

static void budget_init(void)
{
  struct rlimit rl;
  uint64_t memlock = 0;
  if (!r2s__rdma_pin_unlimited() && getrlimit(RLIMIT_MEMLOCK, &rl) == 0) memlock = (uint64_t)rl.rlim_cur;
  budget = r2s__rdma_budget_of(r2s__opt.rdma_memory, memlock);
  if (memlock)
    r2s__debug("RDMA memory budget: %llu bytes (R2SOCK_RDMA_MEMORY %s, memlock limit %llu)",
               (unsigned long long)budget, r2s__opt.rdma_memory ? "set" : "auto", (unsigned long long)memlock);
  else
    r2s__debug("RDMA memory budget: %llu bytes (R2SOCK_RDMA_MEMORY %s, pinning unlimited)",
               (unsigned long long)budget, r2s__opt.rdma_memory ? "set" : "auto");
  pthread_atfork(NULL, NULL, fork_child);
}

uint64_t r2s__rdma_budget(void)
{
  pthread_once(&budget_once, budget_init);
  return budget;
}

uint64_t r2s__rdma_budget_room(void)
{
  uint64_t b = r2s__rdma_budget(), r = __atomic_load_n(&reserved, __ATOMIC_RELAXED);
  return r < b ? b - r : 0;
}

bool r2s__rdma_budget_take(uint64_t n)
{
  uint64_t b = r2s__rdma_budget(), r = __atomic_load_n(&reserved, __ATOMIC_RELAXED);
  do {
    if (n > b || r > b - n) return false;
  } while (!__atomic_compare_exchange_n(&reserved, &r, r + n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  r2s__stat_add(R2S_STAT_rdma_memory_bytes_now, n);
  return true;
}

void r2s__rdma_budget_give(uint64_t n)
{
  __atomic_sub_fetch(&reserved, n, __ATOMIC_RELAXED);
  r2s__stat_sub(R2S_STAT_rdma_memory_bytes_now, n);
}

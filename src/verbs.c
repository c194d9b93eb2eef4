/* Loads libibverbs on first use (see verbs.h for why it is not linked). */
#include "verbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "log.h"

r2s_verbs_t r2s__verbs;

static int load_rc = -ENOENT;
static int loaded; /* atomic: load() succeeded */

static void load(void)
{
  /* RTLD_NODELETE: the providers it loads keep pointers into it. */
  void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    r2s__debug("no RDMA: cannot load libibverbs.so.1 (%s)", dlerror());
    return;
  }
  r2s_verbs_t v;
#define R2S_VERBS_LOAD(name, ret, params)                                                                    \
  *(void **)&v.name = dlsym(h, #name);                                                                       \
  if (!v.name) {                                                                                             \
    r2s__warn("no RDMA: libibverbs.so.1 has no %s (too old?)", #name);                                      \
    return;                                                                                                  \
  }
  R2S_VERBS_FUNCS(R2S_VERBS_LOAD)
#undef R2S_VERBS_LOAD
#define R2S_VERBS_LOAD_OPTIONAL(name, ret, params) *(void **)&v.name = dlsym(h, #name);
  R2S_VERBS_OPTIONAL(R2S_VERBS_LOAD_OPTIONAL)
#undef R2S_VERBS_LOAD_OPTIONAL
  r2s__verbs = v;
  load_rc = 0;
  __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

int r2s__verbs_load(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load);
  return load_rc;
}

bool r2s__verbs_loaded(void)
{
  return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE) != 0;
}

int r2s__verbs_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
  /* What the header's inline wrapper does for a library without the
   * extended op: the compat struct is a prefix of ibv_port_attr. */
  struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof *attr);
  memset(attr, 0, sizeof *attr);
  return R2S_V(ibv_query_port)(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

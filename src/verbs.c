/* Loads libibverbs and librdmacm on first use (see verbs.h and rdmacm.h
 * for why they are not linked). */
#include "verbs.h"
#include "rdmacm.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "log.h"

r2s_verbs_t r2s__verbs;
r2s_rdmacm_t r2s__rdmacm;

static int load_rc = -ENOENT, cm_load_rc = -ENOENT;
static int loaded; /* atomic: load() succeeded */

static void *open_lib(const char *so)
{
  /* RTLD_NODELETE: the providers it loads keep pointers into it. */
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) r2s__debug("no RDMA: cannot load %s (%s)", so, dlerror());
  return h;
}

static bool get_sym(void *h, const char *so, const char *name, void **out)
{
  *out = dlsym(h, name);
  if (!*out) r2s__warn("no RDMA: %s has no %s (too old?)", so, name);
  return *out != NULL;
}

#define R2S_LOAD_REQUIRED(name, ret, params) \
  if (!get_sym(h, so, #name, (void **)&t.name)) return;

static void load(void)
{
  static const char so[] = "libibverbs.so.1";
  void *h = open_lib(so);
  if (!h) return;
  r2s_verbs_t t;
  R2S_VERBS_FUNCS(R2S_LOAD_REQUIRED)
#define R2S_VERBS_LOAD_OPTIONAL(name, ret, params) *(void **)&t.name = dlsym(h, #name);
  R2S_VERBS_OPTIONAL(R2S_VERBS_LOAD_OPTIONAL)
#undef R2S_VERBS_LOAD_OPTIONAL
  r2s__verbs = t;
  load_rc = 0;
  __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

static void load_cm(void)
{
  static const char so[] = "librdmacm.so.1";
  if (r2s__verbs_load() < 0) return;
  void *h = open_lib(so);
  if (!h) return;
  r2s_rdmacm_t t;
  R2S_RDMACM_FUNCS(R2S_LOAD_REQUIRED)
  r2s__rdmacm = t;
  cm_load_rc = 0;
}

int r2s__verbs_load(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load);
  return load_rc;
}

int r2s__rdmacm_load(void)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_cm);
  return cm_load_rc;
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

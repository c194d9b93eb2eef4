/*
 * rdmacm.h - the librdmacm entry points r2sock uses, loaded at run time
 * like libibverbs' (verbs.h; both loaders are in verbs.c).
 *
 * Contract:
 *  - librdmacm serves only to learn which device and port own a local
 *    address (transport/rdma_dev.c). r2s__rdmacm_load() returns 0 once
 *    r2s__rdmacm is filled and libibverbs is loaded too, or -ENOENT
 *    (either library or a symbol missing); idempotent and thread-safe.
 *    A host with libibverbs but without librdmacm runs its connections
 *    on TCP or shared memory.
 *  - librdmacm links libibverbs.so.1, so it uses the one instance loaded
 *    by r2s__verbs_load(): the ibv_context it hands out is a context of
 *    the same library as the shim's.
 *  - Kept out of verbs.h: <rdma/rdma_cma.h> declares many rdma_* names
 *    (rdma_connect, ...) that only rdma_dev.c needs.
 */
#ifndef R2S_RDMACM_H
#define R2S_RDMACM_H

#include <rdma/rdma_cma.h>

/* X(name, return type, parameter list), all required */
#define R2S_RDMACM_FUNCS(X)                                                                                  \
  X(rdma_create_id, int, (struct rdma_event_channel *, struct rdma_cm_id **, void *, enum rdma_port_space))  \
  X(rdma_bind_addr, int, (struct rdma_cm_id *, struct sockaddr *))                                           \
  X(rdma_destroy_id, int, (struct rdma_cm_id *))

typedef struct r2s_rdmacm_s {
#define R2S_RDMACM_PTR(name, ret, params) ret(*name) params;
  R2S_RDMACM_FUNCS(R2S_RDMACM_PTR)
#undef R2S_RDMACM_PTR
} r2s_rdmacm_t;

extern r2s_rdmacm_t r2s__rdmacm;

/* A table entry to call: R2S_CM(rdma_bind_addr)(id, addr). */
#define R2S_CM(name) (r2s__rdmacm.name)

int r2s__rdmacm_load(void);

#endif

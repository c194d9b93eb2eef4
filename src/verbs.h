/*
 * verbs.h - the libibverbs and librdmacm entry points r2sock uses, loaded
 * at run time.
 *
 * Contract:
 *  - The shim is preloaded into every process, most of which never meet an
 *    RDMA peer, and many hosts have no rdma-core at all: libibverbs is
 *    dlopen'ed on the first RDMA offer, never linked. r2s__verbs_load()
 *    returns 0 once r2s__verbs is filled, or -ENOENT (library or a symbol
 *    missing); it is idempotent and thread-safe. The optional entries
 *    (R2S_VERBS_OPTIONAL) may be NULL after a successful load.
 *  - Only the exported functions are in the table. The data-path calls
 *    (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are
 *    inline functions of <infiniband/verbs.h> that jump through the
 *    provider's ops, so they are used directly. ibv_query_port is also an
 *    inline wrapper: use r2s__verbs_query_port().
 *  - librdmacm is loaded the same way (rdmacm.h).
 */
#ifndef R2S_VERBS_H
#define R2S_VERBS_H

#include <infiniband/verbs.h>
#include <stdbool.h>

/* X(name, return type, parameter list) */
#define R2S_VERBS_FUNCS(X)                                                                                   \
  X(ibv_get_device_list, struct ibv_device **, (int *))                                                      \
  X(ibv_free_device_list, void, (struct ibv_device **))                                                      \
  X(ibv_get_device_name, const char *, (struct ibv_device *))                                                \
  X(ibv_open_device, struct ibv_context *, (struct ibv_device *))                                            \
  X(ibv_close_device, int, (struct ibv_context *))                                                           \
  X(ibv_query_device, int, (struct ibv_context *, struct ibv_device_attr *))                                 \
  X(ibv_query_port, int, (struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *))                    \
  X(_ibv_query_gid_ex, int, (struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t, size_t)) \
  X(ibv_alloc_pd, struct ibv_pd *, (struct ibv_context *))                                                   \
  X(ibv_dealloc_pd, int, (struct ibv_pd *))                                                                  \
  X(ibv_reg_mr, struct ibv_mr *, (struct ibv_pd *, void *, size_t, int))                                     \
  X(ibv_dereg_mr, int, (struct ibv_mr *))                                                                    \
  X(ibv_create_comp_channel, struct ibv_comp_channel *, (struct ibv_context *))                              \
  X(ibv_destroy_comp_channel, int, (struct ibv_comp_channel *))                                              \
  X(ibv_create_cq, struct ibv_cq *, (struct ibv_context *, int, void *, struct ibv_comp_channel *, int))     \
  X(ibv_destroy_cq, int, (struct ibv_cq *))                                                                  \
  X(ibv_get_cq_event, int, (struct ibv_comp_channel *, struct ibv_cq **, void **))                           \
  X(ibv_ack_cq_events, void, (struct ibv_cq *, unsigned int))                                                \
  X(ibv_create_qp, struct ibv_qp *, (struct ibv_pd *, struct ibv_qp_init_attr *))                            \
  X(ibv_modify_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int))                                        \
  X(ibv_query_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *))              \
  X(ibv_destroy_qp, int, (struct ibv_qp *))                                                                  \
  X(ibv_get_async_event, int, (struct ibv_context *, struct ibv_async_event *))                              \
  X(ibv_ack_async_event, void, (struct ibv_async_event *))                                                   \
  X(ibv_wc_status_str, const char *, (enum ibv_wc_status))

/* Entry points the shim can do without (NULL when the library is older
 * than they are): _ibv_query_gid_table (rdma-core 30) gives a device's
 * valid GID entries in one call. */
#define R2S_VERBS_OPTIONAL(X) \
  X(_ibv_query_gid_table, ssize_t, (struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t, size_t))

typedef struct r2s_verbs_s {
#define R2S_VERBS_PTR(name, ret, params) ret(*name) params;
  R2S_VERBS_FUNCS(R2S_VERBS_PTR)
  R2S_VERBS_OPTIONAL(R2S_VERBS_PTR)
#undef R2S_VERBS_PTR
} r2s_verbs_t;

extern r2s_verbs_t r2s__verbs;

/* A table entry to call: R2S_V(ibv_reg_mr)(pd, ...). The parentheses keep
 * the header's function-like macros of the same names (ibv_reg_mr,
 * ibv_query_port) from expanding. */
#define R2S_V(name) (r2s__verbs.name)

int r2s__verbs_load(void);
/* Whether an earlier r2s__verbs_load() succeeded; never loads. */
bool r2s__verbs_loaded(void);

/* ibv_query_port() through the table (see the contract). */
int r2s__verbs_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);

#endif

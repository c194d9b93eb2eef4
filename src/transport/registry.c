/* The transports the library knows: one line each. A transport not linked
 * in (a weak reference left undefined: the test-only one, outside the
 * tests) is skipped. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "../transport.h"

/* Defined only where the tests link it (tests/unit/transport_loop.c). */
extern const r2s_transport_t r2s__transport_loop __attribute__((weak, visibility("hidden")));

static const r2s_transport_t *const transports[] = {
    &r2s__transport_shm,
    &r2s__transport_rdma,
    &r2s__transport_loop,
};

#define N_TRANSPORTS (sizeof transports / sizeof transports[0])

const r2s_transport_t *r2s__transport_choose(const char *wanted, const r2s_tp_conn_t *conn)
{
  const r2s_transport_t *best = NULL;
  int best_rank = 0;
  for (size_t i = 0; i < N_TRANSPORTS; i++) {
    const r2s_transport_t *tp = transports[i];
    if (!tp) continue;
    if (wanted) {
      if (strcmp(tp->name, wanted) == 0) return tp;
      continue;
    }
    int rank = tp->rank(conn);
    if (rank > best_rank) best = tp, best_rank = rank;
  }
  return best;
}

int r2s__transports_check(const r2s_handshake_t *peer)
{
  for (size_t i = 0; i < N_TRANSPORTS; i++)
    if (transports[i] && transports[i]->check && transports[i]->check(peer) < 0) return -EPROTO;
  return 0;
}

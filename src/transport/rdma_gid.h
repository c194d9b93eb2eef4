/*
 * rdma_gid.h - which entry of a port's GID table a connection uses, once
 * the RDMA CM has said which device and port own its local address and
 * which GID the address has there (rdma_dev.c). A pure function of the
 * table, so that it can be tested without a device
 * (tests/unit/test_rdma_gid.c).
 *
 * Contract:
 *  - r2s__rdma_gid_pick(t, n, port, gid) returns the position in t of the
 *    entry of that port holding gid, or -1 when there is none. Where the
 *    GID appears more than once (RoCE lists each address as v1 and as v2),
 *    the RoCE v2 entry wins: it is routable (UDP/IP) where v1 is not, and
 *    the kernel's RDMA CM uses v2 by default. Among entries of one type the
 *    first wins, so the choice is stable.
 *  - The RDMA CM does not report the GID index it resolved to, and the
 *    verbs need it (ibv_modify_qp's sgid_index): that is why the table is
 *    searched at all.
 */
#ifndef R2S_TRANSPORT_RDMA_GID_H
#define R2S_TRANSPORT_RDMA_GID_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

static inline ssize_t r2s__rdma_gid_pick(const struct ibv_gid_entry *t, size_t n, uint32_t port,
                                         const union ibv_gid *gid)
{
  ssize_t best = -1;
  for (size_t i = 0; i < n; i++) {
    if (t[i].port_num != port || memcmp(t[i].gid.raw, gid->raw, sizeof gid->raw) != 0) continue;
    if (best < 0 || (t[i].gid_type == IBV_GID_TYPE_ROCE_V2 && t[best].gid_type != IBV_GID_TYPE_ROCE_V2))
      best = (ssize_t)i;
  }
  return best;
}

#endif

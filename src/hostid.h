/*
 * hostid.h - is the peer on this host?
 *
 * Contract: r2s__hostid() returns this process's host identity, read once:
 * the kernel's boot id (random per boot) and the inode of the network
 * namespace. Two ends with equal identities share a kernel and a network
 * stack, so they can share memory and the loopback path is the one that
 * carried their TCP connection. Returns 0 or -errno (then no shm offer).
 */
#ifndef R2S_HOSTID_H
#define R2S_HOSTID_H

#include <stdbool.h>
#include <stdint.h>

typedef struct r2s_hostid_s {
  uint8_t boot_id[16];
  uint64_t netns;
} r2s_hostid_t;

int r2s__hostid(r2s_hostid_t *out);
bool r2s__hostid_equal(const r2s_hostid_t *a, const uint8_t boot_id[16], uint64_t netns);

#endif

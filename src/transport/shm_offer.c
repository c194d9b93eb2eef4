/* The shared-memory transport's HANDSHAKE offer on the wire (shm_offer.h):
 * the segment's name, NUL-padded to R2S_SHM_NAME_MAX bytes, then the
 * ring's size (u64). A peer chose these bytes: nothing is trusted. */
#include "shm_offer.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "../wire.h"

#define BODY (R2S_SHM_NAME_MAX + 8)
_Static_assert(BODY <= R2S_OFFER_BODY_MAX, "the offer fits a handshake's slot");

int r2s__shm_offer_put(r2s_handshake_t *h, const r2s_offer_shm_t *o)
{
  uint8_t b[BODY] = {0};
  memcpy(b, o->name, strnlen(o->name, R2S_SHM_NAME_MAX - 1));
  r2s__put64(b + R2S_SHM_NAME_MAX, o->ring_size);
  return r2s__handshake_add_offer(h, R2S_OFFER_SHM, b, sizeof b);
}

/* The name is used as a path: it must be terminated, start with '/' and
 * hold no other '/'. */
static bool name_ok(const char *name)
{
  return name[R2S_SHM_NAME_MAX - 1] == 0 && name[0] == '/' && name[1] != 0 && !strchr(name + 1, '/');
}

int r2s__shm_offer_get(const r2s_handshake_t *h, r2s_offer_shm_t *o)
{
  size_t len;
  const uint8_t *b = r2s__handshake_offer(h, R2S_OFFER_SHM, &len);
  if (!b) return 0;
  if (len != BODY) return -EPROTO;
  memcpy(o->name, b, R2S_SHM_NAME_MAX);
  if (!name_ok(o->name)) return -EPROTO;
  o->ring_size = r2s__get64(b + R2S_SHM_NAME_MAX);
  return 1;
}

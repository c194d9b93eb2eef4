/* Moving the send direction into the peer's ring once its HANDSHAKE (and
 * READY) came: attach by name, or ask for the ring by descriptor, or
 * decline it. tx_lock held throughout. */
#include "internal.h"

#include <string.h>

#include "hostid.h"

#include "log.h"

#include "sandbox.h"

/* The send side waits for a frame from the peer (its HANDSHAKE, then its
 * READY) that an application which never reads would never make us read:
 * the sender looks for it itself. Atomic loads only: a reader's wait asks
 * too (r2s__link_may_read_ahead), without tx_lock. */
bool lk_awaits_peer(const r2s_link_t *l)
{
  if (!__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE)) return true;
  if (__atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE) == R2S_FETCH_ASKED) return true; /* its HANDED */
  return !__atomic_load_n(&l->no_ring, __ATOMIC_ACQUIRE) && TP(l) && TP(l)->needs_ready &&
         !__atomic_load_n(&l->peer_ready, __ATOMIC_ACQUIRE);
}

#define READ_AHEAD_WINDOW_NS 1000000000ll

bool r2s__link_may_read_ahead(r2s_link_t *l)
{
  return __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_FRAMES &&
         r2s__now_ns() - __atomic_load_n(&l->framed_at, __ATOMIC_RELAXED) <= READ_AHEAD_WINDOW_NS &&
         lk_awaits_peer(l);
}

/* May the peer's ring, which attach() could not open (rc), be had by
 * descriptor? Only where that is why (another user's segment, or another
 * /dev/shm: not there by that name), the peer can hand it over, and the
 * process may still make the calls it takes (sandbox.h). */
static bool may_fetch(const r2s_link_t *l, int rc)
{
  return (rc == -EPERM || rc == -EACCES || rc == -ENOENT) && (l->peer_hs.caps & R2S_CAP_SHM_FD) &&
         TP(l)->fetch && !r2s__sandboxed();
}

/* Asks the peer for its ring by descriptor (a FETCH frame with the
 * address of a socket that waits for it); 0 once asked. tx_lock held, no
 * DATA frame half sent. */
static int ask_for_ring_locked(r2s_link_t *l, int fd, int attach_rc)
{
  r2s_fetch_t ask;
  uint8_t f[R2S_FRAME_HDR_LEN + 1 + R2S_FETCH_ADDR_MAX];
  int rc = TP(l)->fetch(TPS(l), &ask);
  int len = rc < 0 ? rc : r2s__fetch_encode(&ask, f, sizeof f);
  if (len < 0 || lk_queue_ctrl(l, f, (size_t)len) < 0) {
    r2s__debug("cannot ask the peer for its ring by descriptor (%s)", strerror(len < 0 ? -len : ENOBUFS));
    return -1;
  }
  l->attach_rc = attach_rc;
  __atomic_store_n(&l->fetch, R2S_FETCH_ASKED, __ATOMIC_RELEASE);
  (void)lk_flush_ctrl(l, fd);
  r2s__debug("cannot open the peer's ring by name (%s): asked for it by descriptor", strerror(-attach_rc));
  return 0;
}

/* Once both rings are known, the send direction moves into the peer's
 * ring: a RING frame tells the peer where its reading continues. A ring
 * that cannot be opened by name may be asked for by descriptor first
 * (may_fetch); until the peer's HANDED answers, the direction stays on
 * DATA frames. */
void lk_try_ring_tx(r2s_link_t *l, int fd)
{
  lk_send_ready_locked(l, fd);
  lk_send_handed_locked(l, fd);
  if (l->tx_state != R2S_TX_FRAMES || !__atomic_load_n(&l->have_peer_hs, __ATOMIC_ACQUIRE) ||
      l->tx_data_left || l->no_ring || l->plain_unsent)
    return;
  int fetch = __atomic_load_n(&l->fetch, __ATOMIC_ACQUIRE);
  if (fetch == R2S_FETCH_ASKED) return;
  /* Writes into a ring whose end is not ready would be lost (RDMA: the
   * peer's queue pair drops them until it has read our handshake). */
  if (TP(l)->needs_ready && !__atomic_load_n(&l->peer_ready, __ATOMIC_ACQUIRE)) return;
  r2s_hostid_t me;
  r2s_handshake_t mine;
  memset(&mine, 0, sizeof mine);
  if (r2s__hostid(&me) == 0) memcpy(mine.boot_id, me.boot_id, 16), mine.netns = me.netns;
  if (!TP(l)->reaches(&mine, &l->peer_hs)) { /* another host or namespace, or no offer */
    __atomic_store_n(&l->no_ring, true, __ATOMIC_RELEASE);
    l->tcp_reason = R2S_REASON_UNREACHABLE;
    if (lk_send_decline_locked(l, fd, 1)) lk_unframe_declined_locked(l, fd, R2S_REASON_UNREACHABLE);
    return;
  }
  int rc = fetch == R2S_FETCH_DONE ? l->fetch_rc : TP(l)->attach(TPS(l), &l->peer_hs);
  if (rc < 0 && fetch == R2S_FETCH_NONE && may_fetch(l, rc) && ask_for_ring_locked(l, fd, rc) == 0) return;
  if (rc < 0) {
    /* A fetch that failed leaves attach()'s reason standing. */
    if (fetch == R2S_FETCH_DONE) rc = l->attach_rc;
    r2s__debug("cannot attach the peer's ring (%s): staying on TCP frames", strerror(-rc));
    __atomic_store_n(&l->no_ring, true, __ATOMIC_RELEASE); /* do not try again */
    /* A peer running as another user cannot share memory with us: that is
     * the isolation working, not a shortage. */
    l->tcp_reason = (rc == -EACCES || rc == -EPERM) ? R2S_REASON_OTHER_USER : R2S_REASON_NO_RESOURCES;
    if (lk_send_decline_locked(l, fd, 2) && l->tcp_reason == R2S_REASON_OTHER_USER &&
        TP(l)->path == R2S_PATH_SHM)
      lk_unframe_declined_locked(l, fd, R2S_REASON_OTHER_USER);
    return;
  }
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode(R2S_FRAME_RING, 0, f, sizeof f);
  if (lk_queue_ctrl(l, f, sizeof f) < 0) return;
  __atomic_store_n(&l->ring_unsent, true, __ATOMIC_RELEASE);
  set_tx(l, R2S_TX_RING);
  lk_mark_upgraded(l);
  (void)lk_flush_ctrl(l, fd);
  r2s__debug("send direction now in the peer's %s ring", TP(l)->name);
}

/* The control-frame queue of the send direction: control bytes wait here
 * until the kernel takes them, behind nothing the peer could read as
 * application bytes; and the frames made of them (DOORBELL, DECLINE,
 * READY, HANDED, PLAIN). tx_lock held throughout. */
#include "internal.h"

#include <netinet/tcp.h>

#include <string.h>
#include <arpa/inet.h>

#include "libc.h"
#include "log.h"

/* Queues control bytes behind anything still pending; tx_lock held. None
 * behind our PLAIN frame: the peer reads what follows it as application
 * bytes. */
int lk_queue_ctrl(r2s_link_t *l, const void *p, size_t len)
{
  if (l->plain_unsent) return -EPIPE;
  if (len > sizeof l->tx_pending - l->tx_pending_len) return -ENOBUFS;
  memcpy(l->tx_pending + l->tx_pending_len, p, len);
  l->tx_pending_len += (uint32_t)len;
  return 0;
}

/* Our PLAIN frame is all in the kernel: the send direction is plain TCP
 * from here on (r2s__link_send_oob, a ring that could not grow, a peer out
 * of reach). The state first, then the flag: a lockless
 * lk_tx_in_ring never sees the ring open in between. The kernel gets
 * the application's TCP_NODELAY and TCP_CORK back (lk_switch_tx set its own).
 * tx_lock held. */
static void plain_sent_locked(r2s_link_t *l, int fd)
{
  l->tcp_reason = l->plain_reason;
  set_tx(l, R2S_TX_PLAIN);
  if (!l->tcp_nodelay) (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &l->tcp_nodelay, sizeof(int));
  if (l->tcp_cork) (void)r2s__libc.setsockopt(fd, IPPROTO_TCP, TCP_CORK, &l->tcp_cork, sizeof(int));
  __atomic_store_n(&l->plain_unsent, false, __ATOMIC_RELEASE);
  lk_settle_plain(l);
  if (l->plain_reason == R2S_REASON_APP_OOB)
    R2S_STAT_INC(oob_fallbacks);
  else if (l->plain_reason == R2S_REASON_NO_RESOURCES)
    R2S_STAT_INC(room_fallbacks);
}

/* Queues the PLAIN frame that ends our send direction's ring (or frames)
 * after what we put there; lk_flush_ctrl turns the direction plain once the
 * frame has left, and no byte goes behind it before. tx_lock held. */
int lk_queue_plain_locked(r2s_link_t *l, int reason)
{
  return lk_queue_last_frame_locked(l, R2S_FRAME_PLAIN, reason,
                                    l->tx_state == R2S_TX_RING ? TP(l)->produced(TPS(l)) : 0);
}

/* The same for any frame after which the direction is plain TCP: PLAIN,
 * or a failover's FAILOVER (failover.c). */
int lk_queue_last_frame_locked(r2s_link_t *l, int type, int reason, uint64_t at)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode((uint8_t)type, at, f, sizeof f);
  int rc = lk_queue_ctrl(l, f, sizeof f);
  if (rc) return rc;
  l->plain_reason = reason;
  __atomic_store_n(&l->plain_unsent, true, __ATOMIC_RELEASE);
  return 0;
}

/* Pushes pending control bytes into the socket; 0 when all went, -EAGAIN
 * when some are left. A PLAIN frame among them turns the direction plain
 * once it has left, whoever pushed it. tx_lock held. */
int lk_flush_ctrl(r2s_link_t *l, int fd)
{
  while (l->tx_pending_len) {
    ssize_t n = lk_ksend(fd, l->tx_pending, l->tx_pending_len, 0);
    if (n < 0) lk_keep_sock_err(l, n);
    if (n < 0) return (int)n;
    memmove(l->tx_pending, l->tx_pending + n, l->tx_pending_len - (size_t)n);
    l->tx_pending_len -= (uint32_t)n;
  }
  if (__atomic_load_n(&l->ring_unsent, __ATOMIC_RELAXED))
    __atomic_store_n(&l->ring_unsent, false, __ATOMIC_RELEASE);
  if (l->plain_unsent) plain_sent_locked(l, fd);
  /* A failover's resent bytes go right behind our FAILOVER, before any
   * other byte of the application's. */
  return l->backlog ? lk_flush_backlog_locked(l, fd) : 0;
}

void lk_send_doorbell_locked(r2s_link_t *l, int fd)
{
  uint8_t h[R2S_FRAME_HDR_LEN];
  /* After our PLAIN, the peer's sleeping producer finds the room when its
   * sleep slice ends. */
  if (!carries_frames(l)) return;
  r2s__frame_hdr_put(h, sizeof h, R2S_FRAME_DOORBELL, 0);
  /* A doorbell behind a DATA frame in flight would land inside it; the
   * ring is not in use then anyway. */
  if (l->tx_data_left == 0 && lk_queue_ctrl(l, h, sizeof h) == 0) {
    R2S_STAT_INC(doorbells);
    (void)lk_flush_ctrl(l, fd);
  }
}

/* Tells the peer we read its handshake but cannot use its ring; false if
 * the frame could not be queued. */
bool lk_send_decline_locked(r2s_link_t *l, int fd, uint64_t why)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8];
  r2s__frame_u64_encode(R2S_FRAME_DECLINE, why, f, sizeof f);
  if (l->tx_data_left || lk_queue_ctrl(l, f, sizeof f) < 0) return false;
  (void)lk_flush_ctrl(l, fd);
  return true;
}

/* We declined the peer's ring for good, and the peer cannot use ours
 * either: the same test fails on its side (another host or network
 * namespace; for shared memory, a segment of another user), or it offered
 * none (a HANDSHAKE without offers: it has no device or no room). DATA frames
 * would then carry the direction for the rest of its life at a cost to
 * both ends (a cross-user redis-benchmark ran at 0.70x the rate of plain
 * TCP), so a PLAIN frame right behind the DECLINE makes it plain TCP
 * again, as after urgent data. Not after a shortage, which may hit one end
 * only: the peer may still move into our ring, whose doorbells need a
 * framed direction. Only behind our DECLINE, which tells the peer that we
 * read past its mark. tx_lock held, no DATA frame half sent (lk_try_ring_tx). */
void lk_unframe_declined_locked(r2s_link_t *l, int fd, r2s_reason_t why)
{
  if (l->tx_state != R2S_TX_FRAMES || l->plain_unsent || lk_queue_plain_locked(l, why) < 0) return;
  r2s__debug("the peer's ring is out of reach (%s): the send direction goes back to plain TCP",
             why == R2S_REASON_OTHER_USER ? "another user" : "another host or namespace, or no ring offered");
  (void)lk_flush_ctrl(l, fd);
}

/* Tells the peer our end of the transport takes its writes (RDMA: our
 * queue pair is ready to receive), once no DATA frame is half sent. */
void lk_send_ready_locked(r2s_link_t *l, int fd)
{
  uint8_t h[R2S_FRAME_HDR_LEN];
  if (!l->ready_owed || l->tx_data_left) return;
  /* After our PLAIN (urgent data sent while a DATA frame held READY back)
   * the peer writes nothing into our ring without READY: it stays on
   * frames. */
  if (!carries_frames(l)) return;
  r2s__frame_hdr_put(h, sizeof h, R2S_FRAME_READY, 0);
  if (lk_queue_ctrl(l, h, sizeof h) == 0) {
    l->ready_owed = false;
    (void)lk_flush_ctrl(l, fd);
  }
}

/* Answers the peer's FETCH (handle_fetch), once no DATA frame is half
 * sent. After our PLAIN nothing can tell the peer any more: its direction
 * stays on DATA frames. */
void lk_send_handed_locked(r2s_link_t *l, int fd)
{
  uint8_t f[R2S_FRAME_HDR_LEN + 8 + R2S_NONCE_LEN];
  if (!l->handed_owed || l->tx_data_left) return;
  if (!carries_frames(l)) {
    l->handed_owed = false;
    return;
  }
  int len = r2s__handed_encode(&l->handed_msg, f, sizeof f);
  if (len > 0 && lk_queue_ctrl(l, f, (size_t)len) == 0) {
    l->handed_owed = false;
    (void)lk_flush_ctrl(l, fd);
  }
}

/* The progress thread of a transport asks for a DOORBELL (transport.h).
 * It serves every connection of its device and must never wait for one:
 * if another thread holds tx_lock, the doorbell is left owed to it, and
 * lk_tx_unlock sends it before the lock goes. */
void lk_transport_wake(void *arg, int fd)
{
  r2s_link_t *l = arg;
  __atomic_store_n(&l->doorbell_owed, 1, __ATOMIC_SEQ_CST);
  if (r2s__trylock(&l->tx_lock) != 0) return;
  lk_tx_unlock(l, fd);
}

/* Releases tx_lock, sending first the doorbell a progress thread left
 * owed (lk_transport_wake). The flag is looked at again once the lock is
 * free: a wake that came after our look and found the lock still ours
 * left it, and nobody else may be there to send it, so we take the lock
 * back if we can (if we cannot, the new holder sends it). fd < 0: the
 * caller has no descriptor; the doorbell waits for the next holder. */
void lk_tx_unlock(r2s_link_t *l, int fd)
{
  if (fd >= 0 && l->failover_owed) lk_failover_owed_locked(l, fd);
  for (;;) {
    if (fd >= 0 && __atomic_load_n(&l->doorbell_owed, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&l->doorbell_owed, 0, __ATOMIC_SEQ_CST))
      lk_send_doorbell_locked(l, fd);
    r2s__unlock(&l->tx_lock);
    if (fd < 0 || !__atomic_load_n(&l->doorbell_owed, __ATOMIC_SEQ_CST) || r2s__trylock(&l->tx_lock) != 0)
      return;
  }
}

/* Readiness the kernel cannot see (readiness.h, stream.c, wait.h): what the ring
 * and the frames say to poll, the edges of EPOLLET, the peer's liveness
 * behind a full ring, and a wait's spin, nap, arm and learning (spin.h). */
#include "internal.h"

#include <sys/ioctl.h>

#include "libc.h"

static void check_peer_alive(r2s_link_t *l, int fd);

/* A full ring makes us ask the kernel whether the peer is still there
 * (check_peer_alive), a system call. A sender that outruns its reader finds
 * the ring full at almost every look, so between sleeps it asks at most
 * every ALIVE_CHECK_NS; before a sleep (arming) it always asks. */
#define ALIVE_CHECK_NS 50000

static bool alive_check_due(r2s_link_t *l, bool arming)
{
  int64_t now = r2s__now_ns();
  if (!arming && now - __atomic_load_n(&l->alive_checked_at, __ATOMIC_RELAXED) < ALIVE_CHECK_NS) return false;
  __atomic_store_n(&l->alive_checked_at, now, __ATOMIC_RELAXED);
  return true;
}

static short link_poll(r2s_link_t *l, int fd, short events, short *owned, bool arming)
{
  short rev = 0;
  *owned = 0;
  if (FAILED(l)) {
    *owned = events & (POLLIN | POLLOUT);
    return (short)(POLLERR | (events & (POLLIN | POLLOUT)));
  }
  int rx = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE);
  if (!LOST(l) && TPS(l) && lk_channel_lost(l)) lk_transport_lost(l, fd); /* failover.c */
  if ((events & POLLIN) && (rx == R2S_RX_RING || rx == R2S_RX_FRAMES)) {
    *owned |= POLLIN;
    if (r2s__trylock(&l->rx_lock) == 0) {
      /* Control frames up to the next DATA header, or those behind RING
       * when the ring is empty and a look is due. */
      if ((l->rx_state == R2S_RX_FRAMES && l->rx_data_left == 0) ||
          (l->rx_state == R2S_RX_RING && TP(l)->avail(TPS(l)) == 0 && lk_pump_is_due(l)))
        lk_read_control_locked(l, fd, false);
      size_t one = 1;
      if (l->rx_state == R2S_RX_RING && lk_ring_ends_here(l, fd, &one))
        *owned &= (short)~POLLIN; /* after PLAIN: the kernel's answer stands again */
      if (FAILED(l))
        rev |= POLLIN | POLLERR;
      else if (l->rx_shut || l->rx_eof)
        rev |= POLLIN | (l->rx_err ? POLLERR : 0);
      else if (l->rx_state == R2S_RX_RING)
        rev |= (TP(l)->avail(TPS(l)) != 0 || TP(l)->peer_tx_closed(TPS(l))) ? POLLIN : 0;
      else if (l->rx_data_left) {
        int q = 0;
        if (r2s__libc.ioctl(fd, FIONREAD, &q) == 0 && q > 0) rev |= POLLIN;
      }
      lk_rx_unlock(l, fd);
    } else {
      /* Another thread is reading: report what the ring says; if it is
       * empty the reader will consume any doorbell. */
      if (rx == R2S_RX_RING && TP(l)->avail(TPS(l)) != 0) rev |= POLLIN;
    }
  }
  if ((events & POLLIN) && r2s__readahead_len(&l->rx_ahead)) {
    /* Read ahead: readable although the kernel may hold nothing. */
    *owned |= POLLIN;
    rev |= POLLIN;
  }
  if ((events & POLLOUT) && lk_tx_in_ring(l)) {
    *owned |= POLLOUT;
    ssize_t sp = TP(l)->space(TPS(l));
    if (sp == 0 && alive_check_due(l, arming)) {
      check_peer_alive(l, fd);
      /* It may have read the doorbell that says room came after our look:
       * look again, or we would sleep through it. */
      sp = TP(l)->space(TPS(l));
    }
    if (__atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE))
      rev |= POLLOUT | POLLERR;
    else if (sp != 0)
      rev |= sp < 0 ? POLLOUT | POLLERR : POLLOUT;
  }
  return rev;
}

/* r2s__link_poll without a socket: the rings alone, without a system call
 * or a lock. */
static short poll_rings(r2s_link_t *l, short events)
{
  short rev = 0;
  if ((events & POLLIN) && r2s__readahead_len(&l->rx_ahead)) rev |= POLLIN;
  if ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING &&
      (TP(l)->avail(TPS(l)) != 0 || TP(l)->peer_tx_closed(TPS(l))))
    rev |= POLLIN;
  if ((events & POLLOUT) && lk_tx_in_ring(l) && TP(l)->space(TPS(l)) != 0) rev |= POLLOUT;
  return rev;
}

uint64_t r2s__link_filled_at(r2s_link_t *l)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING || !TP(l)->filled_at) return 0;
  return TP(l)->filled_at(TPS(l));
}

short r2s__link_poll(r2s_link_t *l, int fd, short events, short *owned)
{
  if (fd < 0) return poll_rings(l, events);
  return link_poll(l, fd, events, owned, false);
}

bool r2s__link_edge_gen(r2s_link_t *l, short bit, uint64_t *gen)
{
  bool ok = false;
  if (FAILED(l) || __atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE)) return false;
  if (bit == POLLOUT) {
    if (!lk_tx_in_ring(l) || r2s__trylock(&l->tx_lock) != 0) return false;
    ssize_t sp = l->tx_state == R2S_TX_RING ? TP(l)->space(TPS(l)) : -1;
    if (sp >= 0) *gen = TP(l)->produced(TPS(l)) + (uint64_t)sp, ok = true;
    lk_tx_unlock(l, -1);
    return ok;
  }
  if (bit != POLLIN || r2s__readahead_len(&l->rx_ahead) || r2s__trylock(&l->rx_lock) != 0)
    return false;
  size_t one = 1;
  if (l->rx_state == R2S_RX_RING && !l->rx_shut && !l->rx_eof && !lk_ring_ends_here(l, -1, &one)) {
    ssize_t av = TP(l)->avail(TPS(l));
    if (av >= 0) {
      /* The end of the stream is a change too: it must not pass for the
       * bytes already reported. */
      *gen = (TP(l)->consumed(TPS(l)) + (uint64_t)av) * 2 + (TP(l)->peer_tx_closed(TPS(l)) ? 1 : 0);
      ok = true;
    }
  }
  lk_rx_unlock(l, -1);
  return ok;
}

/* Our ring to the peer is full. A live peer frees room; a dead one never
 * will, and shared memory cannot tell the two apart. TCP can: once the
 * peer's end of stream has come, a frame we send to a closed socket is
 * answered with a reset, which the kernel reports as POLLERR/POLLHUP;
 * a peer that only shut down writing just reads the frame. */
static void check_peer_alive(r2s_link_t *l, int fd)
{
  if (__atomic_load_n(&l->peer_gone, __ATOMIC_ACQUIRE)) return;
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  if (r2s__libc.poll(&p, 1, 0) < 0) return;
  /* The control frames the peer sent before its end of stream are read
   * before that end is believed, whether a pump is due or not, and even if
   * the application reads no more (its reader stopped at the stream's last
   * byte, in front of RING): a protocol error among them (a PLAIN past the
   * ring) must end the connection as one, with its warning, not pass for a
   * peer that merely went away. While another thread holds rx_lock, the
   * verdict waits for the next look. */
  bool ended = (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0;
  /* Otherwise, when due: a writer that never reads (iperf3's sender) must
   * still take the doorbells meant for it off the socket, whether the
   * peer's bytes come in frames or through its ring, or the kernel keeps
   * calling the socket readable and every later sleep returns at once.
   * Application bytes in DATA frames in front of them are read ahead
   * (readahead.h), as for the peer's handshake: iperf2's server sends a
   * 28-byte reply its client reads only at the end, and when it left
   * before the server's direction reached the ring, the client's doorbells
   * lay behind it and its writer's sleeps returned at once (13,000 in a
   * 3 s run between two guests, each announced to the peer, and half the
   * throughput). */
  if (r2s__trylock(&l->rx_lock) == 0) {
    int st = l->rx_state;
    if (ended || ((st == R2S_RX_RING || st == R2S_RX_FRAMES) && lk_pump_is_due(l)))
      lk_read_control_locked(l, fd, true);
    lk_rx_unlock(l, fd);
  } else if (ended) {
    return;
  }
  if (FAILED(l)) return;
  if (p.revents & (POLLERR | POLLHUP)) {
    __atomic_store_n(&l->peer_gone, 1, __ATOMIC_RELEASE);
  } else if ((p.revents & POLLRDHUP) && !l->eof_probed && r2s__trylock(&l->tx_lock) == 0) {
    l->eof_probed = true;
    lk_send_doorbell_locked(l, fd);
    lk_tx_unlock(l, fd);
  }
}

bool r2s__link_in_rings(r2s_link_t *l, short events)
{
  if ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING) return false;
  return !(events & POLLOUT) || lk_tx_in_ring(l);
}

/* Only waits for the peer's bytes adapt. A writer waits for room when the
 * reader is slower, and its polling would take CPU from that reader. */
static bool rx_spin_adapts(const r2s_link_t *l)
{
  return __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING && TP(l)->adaptive_spin;
}

/* An answer this large is a stream, not a reply: the writer is busy
 * filling the ring and polling would only take CPU from it. */
#define SPIN_STREAM_BYTES (16u << 10)

/* Only a ring can become ready without the kernel: a direction still on
 * the socket (before the switch, on DATA frames, back to plain TCP) is
 * woken by the kernel, and polling the rings for it sees nothing sooner.
 * A wait over such links (iperf3's server in select() over its control
 * connection, never switched, and a data connection gone plain) polled
 * R2SOCK_SPIN_US per wait all the same: twice the receiver's CPU on
 * loopback (iperf3 against a peer with no ring: 88-92 % against 45-49 %). */
static int64_t spin_budget(r2s_link_t *l, short events, bool may_probe)
{
  bool rx_ring = __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING;
  int64_t rx = (events & POLLIN) && rx_ring ? r2s__spin_budget(&l->rx_spin, rx_spin_adapts(l), may_probe) : 0;
  int64_t tx = (events & POLLOUT) && lk_tx_in_ring(l) ? r2s__spin_budget(&l->tx_spin, false, false) : 0;
  return rx > tx ? rx : tx;
}

int64_t r2s__link_spin_budget(r2s_link_t *l, short events, bool may_probe, bool *yield_now)
{
  int64_t b = spin_budget(l, events, may_probe);
  /* Whether the peer last ran on the CPU this thread runs on (a hint,
   * see transport.h peer_shares_cpu). */
  if (!*yield_now) *yield_now = TPS(l) && TP(l)->peer_shares_cpu && TP(l)->peer_shares_cpu(TPS(l));
  return b;
}

/* A reader's wait that ended after waited_ns, the ring then holding
 * `avail` bytes (answered), or not answered. */
static void learn_rx(r2s_link_t *l, int64_t waited_ns, bool answered, ssize_t avail)
{
  bool stream = answered && avail >= (ssize_t)SPIN_STREAM_BYTES;
  r2s__spin_learn_stream(&l->rx_spin, waited_ns, answered, stream);
  r2s__spin_learn(&l->rx_spin, stream ? INT64_MAX : waited_ns, answered);
}

void r2s__link_spin_learn(r2s_link_t *l, short events, int64_t waited_ns, bool answered)
{
  if (!(events & POLLIN) || !rx_spin_adapts(l)) return;
  learn_rx(l, waited_ns, answered, answered ? TP(l)->avail(TPS(l)) : 0);
}

/* What the ring alone says to a reader: bytes (> 0), something else to
 * read (< 0), nothing (0). Without rx_lock, as poll_rings; the
 * flags that end a read at once (rx_eof, rx_shut) are stored atomically
 * for it, under rx_lock. */
static inline ssize_t look_ring(r2s_link_t *l, const r2s_transport_t *tp, r2s_tp_state_t *tps)
{
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING || r2s__readahead_len(&l->rx_ahead) ||
      FAILED(l) || __atomic_load_n(&l->rx_eof, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&l->rx_shut, __ATOMIC_ACQUIRE))
    return -1;
  ssize_t n = tp->avail(tps);
  if (n > 0) return n;
  return n < 0 || tp->peer_tx_closed(tps) ? -1 : 0;
}

void r2s__link_spin_rx(r2s_link_t *l, int64_t *began)
{
  const r2s_transport_t *tp = TP(l);
  r2s_tp_state_t *tps = TPS(l);
  if (look_ring(l, tp, tps) != 0) return;
  int64_t budget = spin_budget(l, POLLIN, true);
  if (budget <= 0) return;
  r2s_spin_pace_t pace;
  r2s__spin_pace_start(&pace, budget, tp->peer_shares_cpu && tp->peer_shares_cpu(tps));
  while (r2s__spin_pace(&pace)) {
    ssize_t n = look_ring(l, tp, tps);
    if (n != 0) {
      if (rx_spin_adapts(l)) learn_rx(l, r2s__now_ns() - pace.start, true, n);
      return;
    }
  }
  *began = pace.start;
}

int64_t r2s__link_nap_ns(r2s_link_t *l, short events, int64_t waited_ns)
{
  if (!(events & POLLIN) || !rx_spin_adapts(l)) return 0;
  return r2s__spin_nap(&l->rx_spin, waited_ns);
}

__thread const r2s_link_t *lk_arming;
__thread int lk_arming_n;

short r2s__link_arm(r2s_link_t *l, int fd, short events)
{
  short owned, rev = 0;
  /* Counted first: a thread that takes our doorbell from now on pokes. */
  int n = 0;
  if (events & POLLIN) __atomic_add_fetch(&l->sleepers[0], 1, __ATOMIC_SEQ_CST), n++;
  if (events & POLLOUT) __atomic_add_fetch(&l->sleepers[1], 1, __ATOMIC_SEQ_CST), n++;
  lk_pump_later(l); /* a doorbell may come: look at the socket again */
  lk_arming = l, lk_arming_n = n;
  for (;;) {
    bool rx_ring = (events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING;
    bool tx_ring = (events & POLLOUT) && lk_tx_in_ring(l);
    if (rx_ring) TP(l)->sleep_rx(TPS(l), true);
    if (tx_ring) TP(l)->sleep_tx(TPS(l), true);
    /* Re-check after the flags are visible: a producer that published
     * before seeing them will not ring, so its bytes must be found now. */
    rev = link_poll(l, fd, events, &owned, true);
    if (rev & owned) break;
    /* The look itself may have moved a direction into its ring (it read
     * the peer's RING frame, or HANDED let ours in): that ring's word was
     * not set, and its peer would never ring. Arm the new state too. */
    if (rx_ring == ((events & POLLIN) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING) &&
        tx_ring == ((events & POLLOUT) && lk_tx_in_ring(l)))
      break;
  }
  lk_arming = NULL;
  return (short)(rev & owned);
}

bool r2s__link_wakes_sure(r2s_link_t *l)
{
  if (r2s__link_may_read_ahead(l)) return false;
  const r2s_transport_t *tp = TP(l);
  return !tp || tp->wake_sure ||
         (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING &&
          __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) != R2S_TX_RING);
}

/* The quiet word (l->quiet): a state (none, being armed, armed) in its
 * low bits, and above them the events the link was armed for, so that an
 * entry that wants more than a quiet link answers for keeps looking. */
enum { QUIET_NONE, QUIET_ARMING, QUIET_ARMED, QUIET_STATE = 3, QUIET_SHIFT = 2 };

short r2s__link_quiet_events(const r2s_link_t *l)
{
  int q = __atomic_load_n(&l->quiet, __ATOMIC_ACQUIRE);
  return q == QUIET_NONE ? 0 : (short)(q >> QUIET_SHIFT);
}

bool r2s__link_quiet(r2s_link_t *l, int fd, short events, int64_t idle_since)
{
  events = (short)(POLLIN | (events & POLLOUT));
  short have = r2s__link_quiet_events(l);
  if (have) return (events & ~have) == 0;
  if (__atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) != R2S_RX_RING || !r2s__link_wakes_sure(l) || FAILED(l) ||
      __atomic_load_n(&l->quiet_ended_ns, __ATOMIC_RELAXED) > idle_since)
    return false;
  int none = QUIET_NONE, arming = QUIET_ARMING | events << QUIET_SHIFT;
  if (!__atomic_compare_exchange_n(&l->quiet, &none, arming, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    return (events & ~r2s__link_quiet_events(l)) == 0;
  /* Armed as a wait arms, and looked at after the peer can see the words:
   * bytes published, or room made, before it saw them are found here.
   * Armed for room too where the entry wants to write: a writer that
   * fills the ring after this look is told of the room by a DOORBELL,
   * whatever its entry was last told. Whatever ends the quiet meanwhile
   * (lk_changed: the look itself may take a frame) leaves the arm to us
   * to give back. */
  short rev = r2s__link_arm(l, fd, events);
  if (!(rev & POLLIN) && __atomic_compare_exchange_n(&l->quiet, &arming, QUIET_ARMED | events << QUIET_SHIFT,
                                                     false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    R2S_STAT_INC(links_quiet);
    return true;
  }
  r2s__link_unarm(l, events);
  r2s__link_unquiet(l);
  return false;
}

void r2s__link_unquiet(r2s_link_t *l)
{
  int was = __atomic_exchange_n(&l->quiet, QUIET_NONE, __ATOMIC_SEQ_CST);
  if (was == QUIET_NONE) return;
  /* Being armed: the arming thread gives the arm back. */
  if ((was & QUIET_STATE) == QUIET_ARMED) r2s__link_unarm(l, (short)(was >> QUIET_SHIFT));
  __atomic_store_n(&l->quiet_ended_ns, r2s__now_ns(), __ATOMIC_RELAXED);
  /* A wait asleep may never hear of this link otherwise: its doorbell
   * may be the one just taken. */
  lk_sets_look_again();
}

/* The peer's sleeping word of a direction is cleared by the last wait
 * armed on it only: another thread's wait may still sleep on it. One that
 * armed between our count reaching 0 and our clearing set the word before
 * we cleared it, and may have missed bytes published meanwhile: the word
 * is set again and the sleepers are poked (rare). */
static void unarm_dir(r2s_link_t *l, int dir, void (*sleep)(r2s_tp_state_t *, bool), bool in_ring)
{
  if (__atomic_sub_fetch(&l->sleepers[dir], 1, __ATOMIC_SEQ_CST) != 0 || !in_ring) return;
  sleep(TPS(l), false);
  if (__atomic_load_n(&l->sleepers[dir], __ATOMIC_SEQ_CST) == 0) return;
  sleep(TPS(l), true);
  r2s__poke_if(1);
}

void r2s__link_unarm(r2s_link_t *l, short events)
{
  if (events & POLLIN)
    unarm_dir(l, 0, TPS(l) ? TP(l)->sleep_rx : NULL,
              TPS(l) && __atomic_load_n(&l->rx_state, __ATOMIC_ACQUIRE) == R2S_RX_RING);
  if (events & POLLOUT)
    unarm_dir(l, 1, TPS(l) ? TP(l)->sleep_tx : NULL,
              TPS(l) && __atomic_load_n(&l->tx_state, __ATOMIC_ACQUIRE) == R2S_TX_RING);
}

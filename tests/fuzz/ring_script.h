/*
 * ring_script.h - the input format of fuzz_ring: a script of operations on
 * one SPSC ring (4096 data bytes) by its producer, its consumer and a lying
 * peer. Shared by fuzz_ring.c (the reader) and gen_seeds.c (the writer of
 * the seed corpus), so the seeds keep meaning what they say.
 *
 * All integers little-endian. A script that ends mid-operation reads zeros
 * for the missing bytes, so every byte string is a valid script.
 *
 *   u64 base                     head = tail = base before the first op
 *   then ops, each: u8 op (taken modulo RS_OP_COUNT), then its arguments:
 *
 *   RS_PUT      u16 total, u8 segs, u16 skip, u16 max, seg lengths
 *               the producer puts from `total` bytes spread over iovecs
 *   RS_GET      u16 total, u8 segs, u16 max, u8 peek, seg lengths
 *               the consumer gets (or peeks) into `total` bytes of iovecs
 *   RS_SPACE    -                  the producer asks for space
 *   RS_AVAIL    -                  the consumer asks for bytes ready
 *   RS_LIE_HEAD u8 mode, u64 v     the peer stores into ctl->head
 *   RS_LIE_TAIL u8 mode, u64 v     the peer stores into ctl->tail
 *   RS_LIE_WORD u8 which, u32 v    the peer stores into a sleeping/closed word
 *   RS_SCRIBBLE u16 off, u16 len, u8 byte   the peer writes data bytes
 *   RS_REATTACH u64 head, u8 mode, u64 tail  format the control page, store
 *               head and tail (mode bit 0 clear: tail = head + (int16)tail),
 *               attach both ends again
 *
 * total is taken modulo RS_TOTAL_MOD; max RS_MAX_NOLIMIT means "no limit".
 * segs: (segs & 7) % 5 iovecs (0 to 4); bit 7 (RS_SEG_NULL) gives
 * zero-length iovecs a NULL base, which readv/writev allow. "seg lengths"
 * are (iovecs - 1) u16, each the length of one iovec modulo what is left
 * plus one; the last iovec takes the rest.
 * Lie modes (low 2 bits, 3 = 0): 0 absolute v, 1 the current value +
 * (int16)v, 2 the other index + (int16)v (head relative to tail and back).
 */
#ifndef R2S_FUZZ_RING_SCRIPT_H
#define R2S_FUZZ_RING_SCRIPT_H

#define RS_RING_SIZE 4096u
#define RS_TOTAL_MOD (2 * RS_RING_SIZE + 64)
#define RS_MAX_SEGS 4
#define RS_SEG_NULL 0x80
#define RS_MAX_NOLIMIT 0xffff

enum {
  RS_PUT,
  RS_GET,
  RS_SPACE,
  RS_AVAIL,
  RS_LIE_HEAD,
  RS_LIE_TAIL,
  RS_LIE_WORD,
  RS_SCRIBBLE,
  RS_REATTACH,
  RS_OP_COUNT
};

enum { RS_LIE_ABS, RS_LIE_REL_SELF, RS_LIE_REL_OTHER };
enum { RS_REATTACH_REL = 0, RS_REATTACH_ABS = 1 };
enum { RS_WORD_PRODUCER_SLEEPING, RS_WORD_PRODUCER_CLOSED, RS_WORD_CONSUMER_SLEEPING, RS_WORD_CONSUMER_CLOSED };

#endif

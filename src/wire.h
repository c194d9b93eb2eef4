/*
 * wire.h - integers on the wire: little-endian, at any alignment.
 *
 * Contract: every multi-byte integer the shim puts into a frame or an
 * offer body goes through these; p points at enough bytes (the caller
 * checked the bounds).
 */
#ifndef R2S_WIRE_H
#define R2S_WIRE_H

#include <stdint.h>

static inline void r2s__put16(uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}

static inline void r2s__put32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void r2s__put64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t r2s__get16(const uint8_t *p)
{
  return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t r2s__get32(const uint8_t *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static inline uint64_t r2s__get64(const uint8_t *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

#endif

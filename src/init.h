/*
 * init.h - start-up inside someone else's process.
 *
 * Contract:
 *  - r2s__ensure_init() is the first thing every wrapper does. After start-up
 *    it costs one acquire load and a predictable branch. The first caller,
 *    whichever thread or library constructor it is, runs the whole start-up
 *    once (pthread_once); others wait for it.
 *  - Start-up order: libc table, options, log level, fd table, fork handlers,
 *    adoption of TCP sockets inherited across exec. Nothing in it calls a
 *    public socket name.
 *  - Start-up runs with r2s__in_shim raised (libc.h): what it calls passes
 *    straight to libc.
 *  - If a wrapper is re-entered during start-up from the same thread (a
 *    malloc interposer that writes, say), it passes through to libc.
 */
#ifndef R2S_INIT_H
#define R2S_INIT_H

extern int r2s__ready;

void r2s__init_slow(void);

static inline void r2s__ensure_init(void)
{
  if (__builtin_expect(!__atomic_load_n(&r2s__ready, __ATOMIC_ACQUIRE), 0)) r2s__init_slow();
}

#endif

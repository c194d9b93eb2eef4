/*
 * sanitize.h - what the sanitizer builds need to know about the shim.
 *
 * Contract: R2S_LSAN_ROOT(p, len) tells LeakSanitizer that the anonymous
 * mapping [p, p+len) holds pointers to heap blocks (the connection slabs and
 * the epoll registrations live in mmap'd memory, which LSan does not scan),
 * so blocks reachable only from there are not reported as leaks. A no-op in
 * other builds.
 *
 * R2S_SANITIZE_IOV(iov, cnt) checks, in ASan builds, that no byte of the
 * application's buffers is poisoned before the shim hands them on: to a
 * ring the peer reads, or to the kernel through the real libc functions
 * (which ASan's own interceptors never see). A poisoned byte aborts with
 * ASan's description of the address, as liburing's sanitize.c does for
 * buffers handed to the kernel. A no-op in other builds.
 */
#ifndef R2S_SANITIZE_H
#define R2S_SANITIZE_H

#ifdef R2S_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#define R2S_LSAN_ROOT(p, len) __lsan_register_root_region((p), (len))

static inline void r2s__sanitize_iov(const struct iovec *iov, int cnt)
{
  for (int i = 0; i < cnt; i++) {
    void *bad = iov[i].iov_len ? __asan_region_is_poisoned(iov[i].iov_base, iov[i].iov_len) : NULL;
    if (!bad) continue;
    fprintf(stderr, "r2sock: the application handed over a buffer with poisoned bytes (iovec %d, %p + %zu)\n", i,
            iov[i].iov_base, (size_t)((char *)bad - (char *)iov[i].iov_base));
    __asan_describe_address(bad);
    abort();
  }
}
#define R2S_SANITIZE_IOV(iov, cnt) r2s__sanitize_iov((iov), (cnt))
#else
#define R2S_LSAN_ROOT(p, len)      ((void)(p), (void)(len))
#define R2S_SANITIZE_IOV(iov, cnt) ((void)(iov), (void)(cnt))
#endif

#endif

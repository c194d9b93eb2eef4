/*
 * sanitize.h - what the sanitizer builds need to know about the shim.
 *
 * Contract: R2S_LSAN_ROOT(p, len) tells LeakSanitizer that the anonymous
 * mapping [p, p+len) holds pointers to heap blocks (the connection slabs and
 * the epoll registrations live in mmap'd memory, which LSan does not scan),
 * so blocks reachable only from there are not reported as leaks. A no-op in
 * other builds.
 */
#ifndef R2S_SANITIZE_H
#define R2S_SANITIZE_H

#ifdef R2S_ASAN
#include <sanitizer/lsan_interface.h>
#define R2S_LSAN_ROOT(p, len) __lsan_register_root_region((p), (len))
#else
#define R2S_LSAN_ROOT(p, len) ((void)(p), (void)(len))
#endif

#endif

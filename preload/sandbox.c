/* Wrappers of the calls by which a process confines its own system calls
 * (sandbox.h): prctl(PR_SET_SECCOMP) and seccomp(2), which glibc has no
 * wrapper for, so programs (and libseccomp) reach it through syscall().
 * Both pass every argument through unchanged; they only tell the shim
 * first, while it may still make any call. */
#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "sandbox.h"
#include "wrap.h"

/* Both are variadic in their declarations; the kernel reads up to five or
 * six register-sized arguments, and so do these, as glibc's own do. */
R2S_EXPORT int prctl(int option, ...)
{
  va_list ap;
  va_start(ap, option);
  unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
  unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
  va_end(ap);
  r2s__ensure_init();
  if (option == PR_SET_SECCOMP) r2s__sandbox_enter();
  return R2S_LIBC_OR_ENOSYS(prctl, option, a2, a3, a4, a5);
}

R2S_EXPORT long syscall(long number, ...)
{
  va_list ap;
  va_start(ap, number);
  long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
  long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
  va_end(ap);
  /* The shim's own raw calls (libc.c, lingerer.c) come here too, some
   * before the libc table is filled: those need no start-up. */
  long (*next)(long, ...) = __atomic_load_n(&r2s__libc.syscall, __ATOMIC_ACQUIRE);
  if (!next) next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  if (number == SYS_seccomp && (a1 == SECCOMP_SET_MODE_FILTER || a1 == SECCOMP_SET_MODE_STRICT)) {
    r2s__ensure_init();
    r2s__sandbox_enter();
  }
  if (!next) {
    errno = ENOSYS;
    return -1;
  }
  return next(number, a1, a2, a3, a4, a5, a6);
}

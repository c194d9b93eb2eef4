/* The wrapper of prctl(PR_SET_SECCOMP), by which a process confines its
 * own system calls (sandbox.h); seccomp(2), which glibc has no wrapper
 * for, comes through syscall() (syscall.c). It passes every argument
 * through unchanged; it only tells the shim first, while it may still
 * make any call. */
#include <errno.h>
#include <stdarg.h>
#include <sys/prctl.h>

#include "sandbox.h"
#include "wrap.h"

/* Variadic in its declaration; the kernel reads up to five register-sized
 * arguments, and so does this, as glibc's own does. */
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

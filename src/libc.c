/* The saved libc entry points: looked up once with dlsym(RTLD_NEXT). */
#include "libc.h"

#include "lockdebug.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>

r2s_libc_t r2s__libc;
__thread int r2s__in_shim;

void r2s__say_raw(const char *a, const char *b, const char *c)
{
  char msg[200];
  size_t n = 0;
  const char *parts[] = {a, b, c};
  for (size_t i = 0; i < 3; i++) {
    size_t l = strlen(parts[i]);
    if (n + l >= sizeof msg) break;
    memcpy(msg + n, parts[i], l);
    n += l;
  }
  (void)!r2s__syscall(SYS_write, 2, msg, n);
}

/* A message that cannot use the log module: the log writes through
 * r2s__libc.write, which may be the very symbol that is missing. */
static void say_missing(const char *name)
{
  r2s__say_raw("r2sock: libc has no ", name, "; the shim passes every call through\n");
}

static long no_syscall(long number, ...)
{
  (void)number;
  errno = ENOSYS;
  return -1;
}

r2s_syscall_fn_t r2s__syscall_fn(void)
{
  r2s_syscall_fn_t next = __atomic_load_n(&r2s__libc.syscall, __ATOMIC_ACQUIRE);
  if (!next) next = (r2s_syscall_fn_t)dlsym(RTLD_NEXT, "syscall");
  return next ? next : no_syscall;
}

int r2s__libc_load(void)
{
  int rc = 0;
  void *p;
  /* Plain stores of identical values from racing threads: each pointer is
   * written with the value dlsym returns, the same in every thread, and
   * readers only ever see NULL or that value (pointer-sized stores). */
#define R2S_LIBC_LOAD(name, ret, params, required)                                                           \
  p = dlsym(RTLD_NEXT, #name);                                                                               \
  if (!p && (required)) {                                                                                    \
    say_missing(#name);                                                                                      \
    rc = -ENOSYS;                                                                                            \
  }                                                                                                          \
  __atomic_store_n((void **)&r2s__libc.name, p, __ATOMIC_RELEASE);
  R2S_LIBC_FUNCS(R2S_LIBC_LOAD)
#undef R2S_LIBC_LOAD
  r2s__lock_debug_install(); /* a no-op unless built with R2SOCK_LOCK_DEBUG */
  return rc;
}

int r2s__open_raw(const char *path, int flags, unsigned mode)
{
  long fd = r2s__syscall(SYS_openat, AT_FDCWD, path, flags, mode);
  return (int)fd;
}

ssize_t r2s__read_small_raw(const char *path, char *buf, size_t len)
{
  int fd = r2s__open_raw(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t n = r2s__libc.read(fd, buf, len - 1);
  r2s__libc.close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return n;
}

int r2s__fstat_raw(int fd, struct stat *sb)
{
  return (int)r2s__syscall(SYS_fstat, fd, sb);
}

int r2s__sock_ino(int fd, ino_t *ino)
{
  struct stat sb;
  if (r2s__fstat_raw(fd, &sb) != 0) return -errno;
  *ino = sb.st_ino;
  return 0;
}

int r2s__keep_fd(int fd, ino_t *ino)
{
  int dup = r2s__libc.fcntl(fd, F_DUPFD_CLOEXEC, 512);
  if (dup < 0) return -errno;
  int err = r2s__sock_ino(dup, ino);
  if (err < 0) {
    r2s__libc.close(dup);
    return err;
  }
  return dup;
}

bool r2s__still_sock(int fd, ino_t ino)
{
  struct stat sb;
  return fd >= 0 && r2s__fstat_raw(fd, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_ino == ino;
}

void *r2s__mmap_fd_raw(size_t len, int fd)
{
  long p = r2s__syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0L);
  return p == -1 ? MAP_FAILED : (void *)p;
}

void *r2s__mmap_fd_over_raw(void *at, size_t len, int fd)
{
  long p = r2s__syscall(SYS_mmap, at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0L);
  return p == -1 ? MAP_FAILED : (void *)p;
}

int r2s__sockopt_int(int fd, int name)
{
  int v = -1;
  socklen_t len = sizeof v;
  return r2s__libc.getsockopt(fd, SOL_SOCKET, name, &v, &len) == 0 ? v : -1;
}

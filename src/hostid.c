/* Host identity: boot id + network namespace, read once. */
#include "hostid.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libc.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static r2s_hostid_t id;
static int id_err;

static int hexval(char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static void read_id(void)
{
  char buf[64];
  int fd = r2s__open_raw("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    id_err = -errno;
    return;
  }
  ssize_t n = r2s__libc.read(fd, buf, sizeof buf - 1);
  r2s__libc.close(fd);
  if (n < 32) {
    id_err = -EIO;
    return;
  }
  /* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\n": 32 hex digits and dashes */
  int k = 0;
  for (ssize_t i = 0; i < n && k < 32; i++) {
    if (buf[i] == '-') continue;
    int v = hexval(buf[i]);
    if (v < 0) break;
    id.boot_id[k / 2] = (uint8_t)(id.boot_id[k / 2] << 4 | v);
    k++;
  }
  if (k != 32) {
    id_err = -EIO;
    return;
  }
  struct stat st;
  if (stat("/proc/self/ns/net", &st) < 0) {
    id_err = -errno;
    return;
  }
  id.netns = (uint64_t)st.st_ino;
}

int r2s__hostid(r2s_hostid_t *out)
{
  pthread_once(&once, read_id);
  if (id_err) return id_err;
  *out = id;
  return 0;
}

bool r2s__hostid_equal(const r2s_hostid_t *a, const uint8_t boot_id[16], uint64_t netns)
{
  return memcmp(a->boot_id, boot_id, 16) == 0 && a->netns == netns;
}

/* sendfile(2) into a connection the shim carries (sendfile.h). */
#include "sendfile.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "libc.h"
#include "stream.h"

/* sendfile into a connection the shim carries: read the file in chunks and
 * send them; the file offset ends where the bytes sent end, as the kernel's
 * sendfile leaves it. */
ssize_t r2s__stream_sendfile(r2s_conn_t *c, int out_fd, int in_fd, off_t *offset, size_t count)
{
  enum { CHUNK = 128 << 10 };
  char *buf = malloc(CHUNK);
  if (!buf) return -ENOMEM;
  off_t pos = offset ? *offset : 0;
  size_t done = 0;
  ssize_t err = 0;
  while (done < count) {
    size_t want = count - done < CHUNK ? count - done : CHUNK;
    ssize_t got = offset ? pread(in_fd, buf, want, pos) : r2s__libc.read(in_fd, buf, want);
    if (got <= 0) {
      if (got < 0) err = -errno;
      break;
    }
    ssize_t sent = r2s__stream_send(c, out_fd, &(struct iovec){buf, (size_t)got}, 1, 0);
    if (sent < 0) {
      err = sent;
      if (!offset) lseek(in_fd, -got, SEEK_CUR);
      break;
    }
    if (!offset && sent < got) lseek(in_fd, -(got - sent), SEEK_CUR);
    pos += sent;
    done += (size_t)sent;
    if (sent < got) break; /* nonblocking socket full */
  }
  free(buf);
  if (offset) *offset = pos;
  return done ? (ssize_t)done : err;
}

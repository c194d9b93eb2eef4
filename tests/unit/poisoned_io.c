/* A program that hands a poisoned buffer to send() or recv() on a TCP
 * connection (ASan builds only; see poisoned_io.sh): under the shim, with
 * ASan's own send/recv interceptors off, the shim's check must stop it
 * before a byte moves. Exit 0 means nothing stopped it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sanitizer/asan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
  int recv_side = argc > 1 && strcmp(argv[1], "recv") == 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
      getsockname(l, (struct sockaddr *)&a, &al) < 0)
    return perror("listen"), 2;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0) return perror("connect"), 2;
  int s = accept(l, NULL, NULL);
  if (s < 0) return perror("accept"), 2;
  static char buf[4096];
  if (recv_side && send(s, "x", 1, 0) != 1) return perror("send"), 2;
  ASAN_POISON_MEMORY_REGION(buf + 1024, 16);
  ssize_t n = recv_side ? recv(c, buf, sizeof buf, 0) : send(c, buf, sizeof buf, 0);
  printf("poisoned_io: %s returned %zd: nothing stopped it\n", recv_side ? "recv" : "send", n);
  return 0;
}

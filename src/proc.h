/*
 * proc.h - what /proc says: about a process, for the sweeps that remove the
 * shared-memory names of processes that died without removing them; and
 * the kernel's settings the shim sizes itself by (/proc/sys).
 *
 * Contract:
 *  - r2s__proc_stat(pid, ...) reads /proc/PID/stat (pid 0: this process)
 *    into buf and returns the fields after the program name, from the
 *    state letter on; NULL if unreadable. Raw libc calls: safe inside the
 *    shim and at exit.
 *  - r2s__proc_gone(pid) is true when pid no longer runs: no such process, a
 *    zombie, or one whose exit has begun (its sockets may already be closed,
 *    so a peer that saw the stream end must find it gone). False for a live
 *    process and for another user's (not ours to judge). A pid reused since
 *    counts as alive: its name is kept until the new owner's exit.
 *  - r2s__proc_numbers(path, v, n) reads up to n unsigned numbers,
 *    separated by blanks, from a small file such as
 *    /proc/sys/net/ipv4/tcp_wmem into v; returns how many it read (0 when
 *    the file holds none), -1 when it cannot be read. Raw libc calls, as
 *    above.
 */
#ifndef R2S_PROC_H
#define R2S_PROC_H

#include <stdbool.h>
#include <stddef.h>

const char *r2s__proc_stat(int pid, char *buf, size_t len);
bool r2s__proc_gone(int pid);
int r2s__proc_numbers(const char *path, unsigned long *v, int n);

#endif

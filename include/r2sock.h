/*
 * r2sock.h - the public face of r2sock.
 *
 * r2sock is used by preloading libr2sock.so; applications do not link it and
 * need no header. This file is for tools around it (launchers, monitors,
 * tests): the version, the names of the options, and the format of the exit
 * statistics line. The library itself exports only the libc names it
 * interposes.
 */
#ifndef R2SOCK_H
#define R2SOCK_H

#define R2SOCK_VERSION_MAJOR 0
#define R2SOCK_VERSION_MINOR 1
#define R2SOCK_VERSION_PATCH 0

/* Every option is an environment variable with this prefix; see README.md. */
#define R2SOCK_ENV_PREFIX "R2SOCK_"

/* The exit statistics line (R2SOCK_STATS / R2SOCK_STATS_FILE), one per
 * process: "r2sock[PID] stats: name=value name=value ...\n". */
#define R2SOCK_STATS_LINE_TAG " stats:"

#endif

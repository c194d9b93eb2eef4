/*
 * thread.h - the shim's own background threads.
 *
 * Contract: r2s__thread_start(fn, arg) starts fn(arg) on a detached thread
 * with every signal blocked, and returns 0 or -errno. The application's
 * signals are for its own threads: a process-directed signal delivered to
 * one of ours would run the application's handler there (sockperf's
 * SIGINT handler crashed that way), or interrupt what we are doing.
 */
#ifndef R2S_THREAD_H
#define R2S_THREAD_H

int r2s__thread_start(void *(*fn)(void *), void *arg);

#endif

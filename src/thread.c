/* Background threads: detached, with the application's signals blocked. */
#include "thread.h"

#include <pthread.h>
#include <signal.h>

int r2s__thread_start(void *(*fn)(void *), void *arg)
{
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &a, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
  return -rc;
}

/* sandbox.c - see sandbox.h. */
#include "sandbox.h"

#include "conn.h"
#include "statseg.h"

int r2s__sandbox_on;

void r2s__sandbox_enter(void)
{
  /* Silent even at R2SOCK_LOG=debug: the application may already have
   * limited its stderr (see log.c). */
  if (__atomic_exchange_n(&r2s__sandbox_on, 1, __ATOMIC_ACQ_REL)) return;
  r2s__statseg_sandbox();
  r2s__conn_sandbox_all();
}

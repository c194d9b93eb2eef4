/* Exits 0 only if both early transfers (preinit_array, then the library's
 * constructor) moved their bytes intact. */
#include <stdio.h>

extern int early_ctor_ok;
void early_transfer(const char *who);

static void preinit(int argc, char **argv, char **envp)
{
  (void)argc, (void)argv, (void)envp;
  early_transfer("preinit_array");
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_entry)(int, char **, char **) = preinit;

int main(void)
{
  if (early_ctor_ok != 2) {
    fprintf(stderr, "early_ctor: %d of 2 early transfers verified\n", early_ctor_ok);
    return 1;
  }
  puts("early_ctor: ok");
  return 0;
}

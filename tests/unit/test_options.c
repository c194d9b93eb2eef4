/* Typed parsing of the R2SOCK_* options, and loading from the environment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "log.h"
#include "options.h"

static void test_bool(void **state)
{
  (void)state;
  bool b = false;
  const char *yes[] = {"1", "yes", "ON", "true", "Y"}, *no[] = {"0", "no", "off", "FALSE", "n"};
  for (int i = 0; i < 5; i++) {
    assert_true(r2s__parse_bool(yes[i], &b));
    assert_true(b);
    assert_true(r2s__parse_bool(no[i], &b));
    assert_false(b);
  }
  b = true;
  assert_false(r2s__parse_bool("2", &b));
  assert_false(r2s__parse_bool("", &b));
  assert_false(r2s__parse_bool("yess", &b));
  assert_true(b); /* a bad value leaves the output alone */
}

static void test_size(void **state)
{
  (void)state;
  uint64_t v = 7;
  assert_true(r2s__parse_size("0", &v));
  assert_int_equal(v, 0);
  assert_true(r2s__parse_size("4096", &v));
  assert_int_equal(v, 4096);
  assert_true(r2s__parse_size("64K", &v));
  assert_int_equal(v, 65536);
  assert_true(r2s__parse_size("64k", &v));
  assert_int_equal(v, 65536);
  assert_true(r2s__parse_size("2MiB", &v));
  assert_int_equal(v, 2u << 20);
  assert_true(r2s__parse_size("3G", &v));
  assert_int_equal(v, 3ull << 30);
  assert_true(r2s__parse_size("1KB", &v));
  assert_int_equal(v, 1024);
  v = 7;
  const char *bad[] = {"", "-1", "K", "12X", "1.5M", " 1", "1 ", "99999999999999999999",
                       "17179869184G" /* 2^34 G overflows 64 bits */, "4KiBB"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_false(r2s__parse_size(bad[i], &v));
    assert_int_equal(v, 7);
  }
}

static void test_level(void **state)
{
  (void)state;
  int l = -1;
  assert_true(r2s__parse_level("debug", &l));
  assert_int_equal(l, R2S_LOG_DEBUG);
  assert_true(r2s__parse_level("WARNING", &l));
  assert_int_equal(l, R2S_LOG_WARN);
  assert_true(r2s__parse_level("2", &l));
  assert_int_equal(l, R2S_LOG_INFO);
  assert_false(r2s__parse_level("4", &l));
  assert_false(r2s__parse_level("loud", &l));
  assert_int_equal(l, R2S_LOG_INFO);
}

static void test_upgrade(void **state)
{
  (void)state;
  r2s_opt_upgrade_t u = {R2S_UPGRADE_NOW, 0};
  char buf[64];
  assert_true(r2s__parse_upgrade("never", &u));
  assert_int_equal(u.mode, R2S_UPGRADE_NEVER);
  assert_string_equal(r2s__format_upgrade(&u, buf, sizeof buf), "never");
  assert_true(r2s__parse_upgrade("64K", &u));
  assert_int_equal(u.mode, R2S_UPGRADE_AFTER);
  assert_int_equal(u.after_bytes, 65536);
  assert_string_equal(r2s__format_upgrade(&u, buf, sizeof buf), "after 65536 bytes");
  assert_true(r2s__parse_upgrade("0", &u)); /* after 0 bytes is at once */
  assert_int_equal(u.mode, R2S_UPGRADE_NOW);
  assert_true(r2s__parse_upgrade("NOW", &u));
  assert_int_equal(u.mode, R2S_UPGRADE_NOW);
  assert_string_equal(r2s__format_upgrade(&u, buf, sizeof buf), "now");
  assert_true(r2s__parse_upgrade("auto", &u)); /* the default: after 64 KiB */
  assert_int_equal(u.mode, R2S_UPGRADE_AUTO);
  assert_int_equal(u.after_bytes, 65536);
  assert_string_equal(r2s__format_upgrade(&u, buf, sizeof buf), "auto");
  assert_false(r2s__parse_upgrade("sometimes", &u));
  assert_int_equal(u.mode, R2S_UPGRADE_AUTO); /* a bad value leaves it as it was */
}

static void test_ports(void **state)
{
  (void)state;
  r2s_opt_ports_t p = R2S_SKIP_PORTS_DEFAULT;
  char buf[256];
  assert_string_equal(r2s__format_ports(&p, buf, sizeof buf), "21,23,512-514,543-544,873,992");
  assert_true(r2s__ports_has(&p, 23) && r2s__ports_has(&p, 513) && r2s__ports_has(&p, 992));
  assert_false(r2s__ports_has(&p, 22) || r2s__ports_has(&p, 515) || r2s__ports_has(&p, 5201));
  assert_true(r2s__parse_ports("none", &p));
  assert_int_equal(p.n, 0);
  assert_false(r2s__ports_has(&p, 23));
  assert_true(r2s__parse_ports("80,8000-8080,65535", &p));
  assert_int_equal(p.n, 3);
  assert_true(r2s__ports_has(&p, 8042) && r2s__ports_has(&p, 65535) && !r2s__ports_has(&p, 81));
  assert_string_equal(r2s__format_ports(&p, buf, sizeof buf), "80,8000-8080,65535");
  /* Bad values leave the previous list alone. */
  static const char *const bad[] = {"", "0", "65536", "80-79", "80,", ",80", "80-", "-80", "80 ,81", "eighty",
                                    "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(r2s__parse_ports(bad[i], &p));
  assert_int_equal(p.n, 3);
  assert_true(r2s__parse_ports("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", &p));
  assert_int_equal(p.n, 16);
}

static void test_programs(void **state)
{
  (void)state;
  r2s_opt_programs_t p = R2S_SKIP_PROGRAMS_DEFAULT;
  char buf[512];
  assert_string_equal(r2s__format_programs(&p, buf, sizeof buf), "rsync,git");
  assert_true(r2s__programs_has(&p, "rsync"));
  assert_true(r2s__programs_has(&p, "git"));
  assert_false(r2s__programs_has(&p, "git-daemon"));
  /* Whole names only: not a prefix, not a path, not another case. */
  assert_false(r2s__programs_has(&p, "rsyn") || r2s__programs_has(&p, "rsync2") ||
               r2s__programs_has(&p, "/usr/bin/rsync") || r2s__programs_has(&p, "RSYNC"));
  assert_true(r2s__parse_programs("none", &p));
  assert_int_equal(p.n, 0);
  assert_false(r2s__programs_has(&p, "rsync"));
  assert_string_equal(r2s__format_programs(&p, buf, sizeof buf), "none");
  assert_true(r2s__parse_programs("rsync,python3.11,a", &p));
  assert_int_equal(p.n, 3);
  assert_true(r2s__programs_has(&p, "python3.11") && r2s__programs_has(&p, "a") && !r2s__programs_has(&p, ""));
  assert_string_equal(r2s__format_programs(&p, buf, sizeof buf), "rsync,python3.11,a");
  /* 31 bytes is the longest name. */
  assert_true(r2s__parse_programs("abcdefghijklmnopqrstuvwxyz01234", &p));
  assert_true(r2s__programs_has(&p, "abcdefghijklmnopqrstuvwxyz01234"));
  /* Bad values leave the previous list alone. */
  static const char *const bad[] = {"", ",", "rsync,", ",rsync", "a,,b", "/usr/bin/rsync", "r sync", "rsync\t",
                                    "abcdefghijklmnopqrstuvwxyz012345", "a,b,c,d,e,f,g,h,i"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(r2s__parse_programs(bad[i], &p));
  assert_int_equal(p.n, 1);
  assert_true(r2s__parse_programs("a,b,c,d,e,f,g,h", &p));
  assert_int_equal(p.n, 8);
}

static void test_seconds(void **state)
{
  (void)state;
  unsigned v = 7;
  assert_true(r2s__parse_seconds("0", &v));
  assert_int_equal(v, 0);
  assert_true(r2s__parse_seconds("3600", &v));
  assert_int_equal(v, 3600);
  assert_false(r2s__parse_seconds("3601", &v));
  assert_false(r2s__parse_seconds("1K", &v));
  assert_false(r2s__parse_seconds("soon", &v));
  assert_int_equal(v, 3600);
}

static void test_ring_size(void **state)
{
  (void)state;
  uint64_t v = 7;
  assert_true(r2s__parse_ringsize("auto", &v));
  assert_int_equal(v, 0);
  assert_true(r2s__parse_ringsize("4K", &v));
  assert_int_equal(v, 4096);
  assert_true(r2s__parse_ringsize("1G", &v));
  assert_int_equal(v, 1u << 30);
  const char *bad[] = {"0", "2K", "3M", "2G", "Auto", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = 7;
    assert_false(r2s__parse_ringsize(bad[i], &v));
    assert_int_equal(v, 7);
  }
  /* auto: each transport's own; a set size: every transport's */
  uint64_t saved = r2s__opt.ring_size;
  r2s__opt.ring_size = 0;
  assert_int_equal(r2s__ring_size(false), 512u << 10);
  assert_int_equal(r2s__ring_size(true), 2u << 20);
  r2s__opt.ring_size = 64u << 10;
  assert_int_equal(r2s__ring_size(false), 64u << 10);
  assert_int_equal(r2s__ring_size(true), 64u << 10);
  r2s__opt.ring_size = saved;
}

static void test_load_from_environment(void **state)
{
  (void)state;
  r2s_options_t defaults = r2s__opt;
  assert_int_equal(defaults.upgrade.mode, R2S_UPGRADE_AUTO); /* what a user gets who sets nothing */
  assert_int_equal(defaults.upgrade.after_bytes, 65536);
  setenv("R2SOCK_UPGRADE", "1M", 1);
  setenv("R2SOCK_STATS_FILE", "/tmp/x", 1);
  setenv("R2SOCK_LOG", "loud", 1); /* bad: warns, keeps the default */
  r2s__options_load();
  assert_int_equal(r2s__opt.upgrade.mode, R2S_UPGRADE_AFTER);
  assert_int_equal(r2s__opt.upgrade.after_bytes, 1u << 20);
  assert_string_equal(r2s__opt.stats_file, "/tmp/x");
  assert_true(r2s__opt.stats); /* STATS_FILE implies STATS */
  assert_int_equal(r2s__opt.log_level, defaults.log_level);
  unsetenv("R2SOCK_UPGRADE");
  unsetenv("R2SOCK_STATS_FILE");
  unsetenv("R2SOCK_LOG");
  free((void *)r2s__opt.stats_file); /* string options are the shim's own copies */
  r2s__opt = defaults;
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bool),  cmocka_unit_test(test_size),
      cmocka_unit_test(test_level), cmocka_unit_test(test_upgrade),
      cmocka_unit_test(test_ports), cmocka_unit_test(test_programs), cmocka_unit_test(test_seconds), cmocka_unit_test(test_ring_size),
      cmocka_unit_test(test_load_from_environment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

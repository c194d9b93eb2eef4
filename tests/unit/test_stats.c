/* The counters and their one-line, parseable exit format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "stats.h"

static void test_format_has_every_counter(void **state)
{
  (void)state;
  r2s__stats_reset();
  R2S_STAT_INC(conn_seen);
  R2S_STAT_INC(conn_seen);
  r2s__stat_add(R2S_STAT_bytes_tcp_tx, 1234567890123ull);
  r2s_stats_t s;
  r2s__stats_snapshot(&s);
  char line[2048], prefix[64];
  size_t n = r2s__stats_format(&s, line, sizeof line);
  assert_int_equal(n, strlen(line));
  assert_int_equal(line[n - 1], '\n');
  assert_int_equal(strchr(line, '\n'), line + n - 1); /* exactly one line */
  snprintf(prefix, sizeof prefix, "r2sock[%d] stats: ", (int)getpid());
  assert_memory_equal(line, prefix, strlen(prefix));
  assert_non_null(strstr(line, " conn_seen=2 "));
  assert_non_null(strstr(line, " bytes_tcp_tx=1234567890123 "));
  for (int i = 0; i < R2S_STAT_COUNT; i++) {
    char key[64];
    snprintf(key, sizeof key, " %s=", r2s__stat_name((r2s_stat_id_t)i));
    assert_non_null(strstr(line, key));
  }
}

static void test_truncation_keeps_one_line(void **state)
{
  (void)state;
  r2s_stats_t s;
  r2s__stats_snapshot(&s);
  char line[40];
  size_t n = r2s__stats_format(&s, line, sizeof line);
  assert_true(n < sizeof line);
  assert_int_equal(line[n - 1], '\n');
  assert_int_equal(strlen(line), n);
}

static void test_reset(void **state)
{
  (void)state;
  R2S_STAT_INC(forks);
  r2s__stats_reset();
  r2s_stats_t s;
  r2s__stats_snapshot(&s);
  for (int i = 0; i < R2S_STAT_COUNT; i++) assert_int_equal(s.v[i], 0);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_format_has_every_counter),
      cmocka_unit_test(test_truncation_keeps_one_line),
      cmocka_unit_test(test_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Which GID table entry a connection uses once the RDMA CM has named its
 * device, port and GID (transport/rdma_gid.h): tables as a RoCE port
 * lists them (each address as v1 and v2, in either order), two ports
 * holding the same address, InfiniBand's port GID, and no entry at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "transport/rdma_gid.h"

/* ::ffff:10.77.0.1, as a RoCE table holds an IPv4 address */
static union ibv_gid v4(uint8_t last)
{
  union ibv_gid g = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 10, [13] = 77, [14] = 0, [15] = last}};
  return g;
}

static union ibv_gid link_local(void)
{
  union ibv_gid g = {.raw = {0xfe, 0x80, [8] = 0x02, [15] = 0x01}};
  return g;
}

static struct ibv_gid_entry entry(uint32_t port, uint32_t index, union ibv_gid gid, uint32_t type)
{
  struct ibv_gid_entry e = {.gid = gid, .gid_index = index, .port_num = port, .gid_type = type};
  return e;
}

/* Soft-RoCE and ConnectX list v1 then v2 for each address: v2 wins. */
static void test_v2_after_v1(void **state)
{
  (void)state;
  struct ibv_gid_entry t[] = {
      entry(1, 0, link_local(), IBV_GID_TYPE_ROCE_V1), entry(1, 1, link_local(), IBV_GID_TYPE_ROCE_V2),
      entry(1, 2, v4(1), IBV_GID_TYPE_ROCE_V1),        entry(1, 3, v4(1), IBV_GID_TYPE_ROCE_V2),
  };
  union ibv_gid want = v4(1);
  assert_int_equal(r2s__rdma_gid_pick(t, 4, 1, &want), 3);
  want = link_local();
  assert_int_equal(r2s__rdma_gid_pick(t, 4, 1, &want), 1);
}

/* Whatever the order, v2 wins, and among equals the first. */
static void test_v2_before_v1(void **state)
{
  (void)state;
  struct ibv_gid_entry t[] = {
      entry(1, 4, v4(1), IBV_GID_TYPE_ROCE_V2),
      entry(1, 5, v4(1), IBV_GID_TYPE_ROCE_V1),
      entry(1, 6, v4(1), IBV_GID_TYPE_ROCE_V2),
  };
  union ibv_gid want = v4(1);
  assert_int_equal(r2s__rdma_gid_pick(t, 3, 1, &want), 0);
  /* a port with v1 only: its v1 entry */
  assert_int_equal(r2s__rdma_gid_pick(t + 1, 1, 1, &want), 0);
}

/* The table of one call covers every port: only the CM's port counts. */
static void test_port(void **state)
{
  (void)state;
  struct ibv_gid_entry t[] = {
      entry(1, 0, v4(1), IBV_GID_TYPE_ROCE_V2),
      entry(2, 0, v4(1), IBV_GID_TYPE_ROCE_V1),
      entry(2, 1, v4(2), IBV_GID_TYPE_ROCE_V2),
  };
  union ibv_gid want = v4(1);
  assert_int_equal(r2s__rdma_gid_pick(t, 3, 2, &want), 1);
  assert_int_equal(r2s__rdma_gid_pick(t, 3, 1, &want), 0);
  assert_int_equal(r2s__rdma_gid_pick(t, 3, 3, &want), -1);
}

/* InfiniBand: the port GID (type IB) the CM reports for IPoIB. */
static void test_infiniband(void **state)
{
  (void)state;
  union ibv_gid port_gid = link_local();
  struct ibv_gid_entry t[] = {entry(1, 0, port_gid, IBV_GID_TYPE_IB)};
  assert_int_equal(r2s__rdma_gid_pick(t, 1, 1, &port_gid), 0);
}

/* No entry for the address (another address, an empty table). */
static void test_none(void **state)
{
  (void)state;
  struct ibv_gid_entry t[] = {entry(1, 0, v4(2), IBV_GID_TYPE_ROCE_V2)};
  union ibv_gid want = v4(1);
  assert_int_equal(r2s__rdma_gid_pick(t, 1, 1, &want), -1);
  assert_int_equal(r2s__rdma_gid_pick(t, 0, 1, &want), -1);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_v2_after_v1), cmocka_unit_test(test_v2_before_v1), cmocka_unit_test(test_port),
      cmocka_unit_test(test_infiniband),  cmocka_unit_test(test_none),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

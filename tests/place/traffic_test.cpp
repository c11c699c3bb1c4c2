#include "place/traffic.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

core::Topology two_by_two() {
  core::Cluster cluster;
  cluster.name = "2x2";
  cluster.levels = {{"node", 2, 10e9, 5e-6}, {"gpu", 2, 100e9, 1e-6}};
  return core::Topology(cluster);
}

RoutingCounts hand_counts() {
  RoutingCounts num(4, 4);
  const int64_t rows[4][4] = {{3, 1, 2, 0}, {0, 4, 0, 1}, {1, 0, 0, 5}, {2, 2, 1, 1}};
  for (int i = 0; i < 4; ++i) {
    for (int e = 0; e < 4; ++e) num.at(i, e) = rows[i][e];
  }
  return num;
}

// Worked by hand with NetMoE Eq. 3-4: node(d) = d / 2, samples and experts in order.
TEST(A2ATraffic, CountsTokensByTheLevelTheyCross) {
  const A2ATraffic t = a2a_traffic(hand_counts(), {0, 1, 2, 3}, {0, 1, 2, 3}, two_by_two());
  EXPECT_EQ(t.same_device, 8);
  EXPECT_EQ(t.inter_node(), 8);
  EXPECT_EQ(t.intra_node(), 7);
  // Node 1 sends 1 + 4 and node 0 receives 1 + 2 + 2; device 2 sends 5 to device 3.
  EXPECT_EQ(t.busiest_worker_tokens, (std::vector<int64_t>{5, 5}));
}

TEST(A2ATraffic, TimeIsEq1OverTheBusiestWorkerOfEachLevel) {
  const core::Topology topo = two_by_two();
  const A2ATraffic t = a2a_traffic(hand_counts(), {0, 1, 2, 3}, {0, 1, 2, 3}, topo);
  // max(5 us + 5 MB / 10 GB/s, 1 us + 5 MB / 100 GB/s)
  EXPECT_DOUBLE_EQ(a2a_time(t, topo, 1e6), 5e-6 + 5e-4);
  const A2ATraffic local = a2a_traffic(hand_counts(), {0, 0, 0, 0}, {0, 0, 0, 0}, topo);
  EXPECT_EQ(local.same_device, 23);
  EXPECT_DOUBLE_EQ(a2a_time(local, topo, 1e6), 0.0);  // nothing crosses a link
}

TEST(A2ATraffic, MovingASampleChangesOnlyItsOwnTokens) {
  // Swapping samples 0 and 3 (NetMoE Fig. 2's kind of move): per sample, by hand.
  const A2ATraffic t = a2a_traffic(hand_counts(), {3, 1, 2, 0}, {0, 1, 2, 3}, two_by_two());
  EXPECT_EQ(t.inter_node(), 4 + 1 + 1 + 2);
  EXPECT_EQ(t.intra_node(), 2 + 0 + 5 + 2);
  EXPECT_EQ(t.same_device, 0 + 4 + 0 + 2);
}

TEST(A2ATraffic, RejectsBadPlacements) {
  const core::Topology topo = two_by_two();
  EXPECT_ERROR_HAS(a2a_traffic(hand_counts(), {0, 1, 2}, {0, 1, 2, 3}, topo), "sample_device",
                   "3 entries", "(4)");
  EXPECT_ERROR_HAS(a2a_traffic(hand_counts(), {0, 1, 2, 3}, {0, 1, 2, 4}, topo), "expert_device[3]",
                   "device 4 is outside [0, 4)");
  EXPECT_ERROR_HAS(a2a_traffic(hand_counts(), {0, -1, 2, 3}, {0, 1, 2, 3}, topo),
                   "sample_device[1]");
}

TEST(Placements, HomeAndExpertBlocksAreEqualContiguousShares) {
  EXPECT_EQ(home_placement(6, 4), (std::vector<int>{0, 0, 1, 1, 2, 3}));
  EXPECT_EQ(device_capacities(6, 4), (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(expert_blocks(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(expert_blocks(2, 4), (std::vector<int>{0, 2}));
  const DeviceGrid grid = DeviceGrid::of(two_by_two());
  EXPECT_EQ(grid.nodes, 2);
  EXPECT_EQ(grid.devices_per_node, 2);
  EXPECT_EQ(grid.node_of(3), 1);
}

}  // namespace
}  // namespace moecomm::place

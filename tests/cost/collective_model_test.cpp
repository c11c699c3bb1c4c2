#include "cost/collective_model.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::cost {
namespace {

core::Topology two_by_four() {
  core::Cluster c;
  c.name = "t";
  c.levels = {{"node", 2, 25e9, 5e-6}, {"gpu", 4, 200e9, 2e-6}};
  c.efficiency["node"]["alltoall"] = {{1e6, 0.5}, {1e9, 1.0}};
  return core::Topology(c);
}

TEST(CollectiveModel, RingFormulas) {
  core::Topology t = two_by_four();
  CollectiveModel m(t);
  const double n = 400e6;
  // AllReduce over 4 GPUs in a node: 2 (p-1)/p n / B + 2 (p-1) latency.
  EXPECT_DOUBLE_EQ(m.time(Collective::kAllReduce, 1, 4, n), 2 * 0.75 * n / 200e9 + 6 * 2e-6);
  EXPECT_DOUBLE_EQ(m.time(Collective::kAllGather, 1, 4, n), 0.75 * n / 200e9 + 3 * 2e-6);
  EXPECT_DOUBLE_EQ(m.time(Collective::kAllGather, 1, 1, n), 0.0);
  // The node link is the node's: its 4 GPUs share it, 6.25 GB/s each.
  EXPECT_DOUBLE_EQ(m.group_time(Collective::kAllReduce, {0, 4}, n),
                   2 * 0.5 * n / 6.25e9 + 2 * 5e-6);
  EXPECT_DOUBLE_EQ(m.group_time(Collective::kAllReduce, {3}, n), 0.0);
}

TEST(CollectiveModel, AllToAllSharesAndSlowestLevel) {
  core::Topology t = two_by_four();
  CollectiveModel m(t);
  std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  auto share = m.alltoall_level_shares(all);
  EXPECT_DOUBLE_EQ(share[0], 0.5);    // 4 of 8 peers on the other node
  EXPECT_DOUBLE_EQ(share[1], 0.375);  // 3 of 8 in the node (1/8 stays on the device)
  // Efficiency of the node link at 1e9 bytes is 1; the inter-node share bounds the time. All
  // messages are in flight together: one latency.
  EXPECT_DOUBLE_EQ(m.alltoall_time(all, 1e9), 5e-6 + 0.5 * 1e9 / 6.25e9);
  // At 1e6 bytes the node link runs at 50%.
  EXPECT_DOUBLE_EQ(m.alltoall_time(all, 1e6), 5e-6 + 0.5 * 1e6 / 3.125e9);
  EXPECT_EQ(m.bottleneck_level({0, 1, 5}), 0);
  EXPECT_EQ(m.bottleneck_level({4, 5}), 1);
}

// LogGP: every message costs its sender and its receiver the overhead o of its level, one
// after another; the latency stays once per message in flight.
TEST(CollectiveModel, PerMessageOverheadAtSenderAndReceiver) {
  core::Cluster c;
  c.name = "t";
  c.levels = {{"node", 2, 25e9, 5e-6, 1e-6}, {"gpu", 4, 200e9, 2e-6, 0.5e-6}};
  const core::Topology t(c);
  CollectiveModel m(t);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // 4 peers over the node link, 3 inside the node: 2 (4 x 1 + 3 x 0.5) us of overheads.
  EXPECT_DOUBLE_EQ(m.alltoall_time(all, 1e9), 5e-6 + 0.5 * 1e9 / 6.25e9 + 2 * (4e-6 + 1.5e-6));
  // A ring step is one message each way: 3 steps of latency + 2o.
  EXPECT_DOUBLE_EQ(m.time(Collective::kAllGather, 1, 4, 4e8), 0.75 * 4e8 / 200e9 + 3 * 3e-6);
  EXPECT_DOUBLE_EQ(m.time(Collective::kAllToAll, 1, 4, 4e8), 0.75 * 4e8 / 200e9 + 2e-6 + 3e-6);
}

TEST(CollectiveModel, Errors) {
  core::Topology t = two_by_four();
  CollectiveModel m(t);
  EXPECT_ERROR_HAS(m.line(Collective::kAllToAll, 0, 0, 1), "group size must be at least 1");
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reducescatter");
}

}  // namespace
}  // namespace moecomm::cost

#include "plan/lina_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

TEST(LinaPartition, RingAllReduceLine) {
  // 4 ranks: 6 steps of 5 us; each rank sends 6/4 of the tensor at 10 GB/s.
  const cost::AlphaBeta line = lina_allreduce_line(4, 10e9, 5e-6);
  EXPECT_DOUBLE_EQ(line.alpha, 30e-6);
  EXPECT_DOUBLE_EQ(line.beta, 1.5e-10);
  const cost::AlphaBeta one = lina_allreduce_line(1, 10e9, 5e-6);
  EXPECT_EQ(one.alpha, 0.0);
  EXPECT_EQ(one.beta, 0.0);
}

TEST(LinaPartition, LargestMicroOpThatFitsTheGap) {
  LinaPartitionInput in;
  in.allreduce = lina_allreduce_line(4, 10e9, 0.0);  // 1.5e-10 s per byte
  in.gap_seconds = 3e-3;                             // 3e-3 / 1.5e-10 = 20 MB
  EXPECT_NEAR(lina_partition_bytes(in), 20e6, 1e-3);
  in.allreduce = lina_allreduce_line(4, 10e9, 5e-6);  // minus 30 us of steps: 19.8 MB
  EXPECT_NEAR(lina_partition_bytes(in), 19.8e6, 1e-3);
  in.gap_seconds = 10e-3;  // 66.5 MB, above Lina's 50 MB
  EXPECT_DOUBLE_EQ(lina_partition_bytes(in), 50e6);
  in.gap_seconds = 1e-3;  // 6.5 MB, below Lina's 10 MB
  EXPECT_DOUBLE_EQ(lina_partition_bytes(in), 10e6);
  in.gap_seconds = 0.0;
  EXPECT_DOUBLE_EQ(lina_partition_bytes(in), 10e6);
  in.gap_seconds.reset();  // Lina Sec. 7.1 default
  EXPECT_DOUBLE_EQ(lina_partition_bytes(in), 30e6);
  in.min_bytes = 1e6;
  in.max_bytes = 100e6;
  in.allreduce = lina_allreduce_line(4, 10e9, 0.0);
  in.gap_seconds = 10e-3;  // 66.67 MB inside the wider bounds
  EXPECT_NEAR(lina_partition_bytes(in), 10e-3 / 1.5e-10, 1e-3);
  in.allreduce = lina_allreduce_line(1, 10e9, 0.0);  // no AllReduce: any size fits
  EXPECT_DOUBLE_EQ(lina_partition_bytes(in), 100e6);
}

TEST(LinaPartition, EqualChunksPerGradient) {
  LinaMicroOps ops = lina_partition(100e6, 30e6);
  EXPECT_EQ(ops.count, 4);
  EXPECT_DOUBLE_EQ(ops.bytes_each, 25e6);
  ops = lina_partition(90e6, 30e6);
  EXPECT_EQ(ops.count, 3);
  EXPECT_DOUBLE_EQ(ops.bytes_each, 30e6);
  ops = lina_partition(1e6, 30e6);
  EXPECT_EQ(ops.count, 1);
  EXPECT_DOUBLE_EQ(ops.bytes_each, 1e6);
  ops = lina_partition(0.0, 30e6);
  EXPECT_EQ(ops.count, 0);
}

// Lina's testbed shape: nodes of 4 GPUs; here 2 nodes, 12.5 GB/s (100 Gbit/s IB) between
// nodes and 100 GB/s inside one.
const std::vector<LinaLinkLevel> kTwoNodes = {{2, 12.5e9, 0.0}, {4, 100e9, 0.0}};

TEST(LinaA2a, PerLevelTrafficByHand) {
  // 8 ranks: 4 peers in the other node get 4 x 1 MB over 12.5 GB/s = 0.32 ms; 3 peers in the
  // node get 3 MB over 100 GB/s = 0.03 ms. The slower level decides.
  EXPECT_NEAR(lina_a2a_seconds(8e6, 8, kTwoNodes), 0.32e-3, 1e-15);
  EXPECT_NEAR(lina_a2a_seconds(8e6, 4, kTwoNodes), 0.06e-3, 1e-15);  // 3 x 2 MB in the node
  EXPECT_NEAR(lina_a2a_seconds(8e6, 2, kTwoNodes), 0.04e-3, 1e-15);  // 1 x 4 MB
  EXPECT_EQ(lina_a2a_seconds(8e6, 1, kTwoNodes), 0.0);
  std::vector<LinaLinkLevel> slow = kTwoNodes;
  slow[0].latency = 10e-6;
  EXPECT_NEAR(lina_a2a_seconds(8e6, 8, slow), 0.33e-3, 1e-15);
  EXPECT_NEAR(lina_a2a_seconds(8e6, 4, slow), 0.06e-3, 1e-15);  // no inter-node traffic
}

LinaPackingInput packing_input() {
  LinaPackingInput in;
  in.experts = 8;
  in.ep = 8;
  in.levels = kTwoNodes;
  in.microop_bytes = 8e6;
  in.token_bytes = 8e3;          // 1000 rows per micro-op
  in.ffn_flops_per_token = 1e7;  // 1e10 flops per micro-op
  in.flops = 1e14;               // 0.1 ms
  return in;
}

TEST(LinaPacking, DoublesUntilFfnCoversA2a) {
  // 1 per device: A2A 0.32 ms > FFN 0.1 ms. 2 per device: group of 4 inside a node, A2A
  // 0.06 ms <= 0.1 ms: stop (Lina Sec. 7.2.1: 8 experts packed 2 per device avoid inter-node
  // A2A on 4-GPU servers).
  const LinaPacking p = lina_pack_experts(packing_input());
  EXPECT_EQ(p.experts_per_device, 2);
  EXPECT_EQ(p.ep_group, 4);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].experts_per_device, 1);
  EXPECT_NEAR(p.steps[0].ffn_seconds, 0.1e-3, 1e-15);
  EXPECT_NEAR(p.steps[0].a2a_seconds, 0.32e-3, 1e-15);
  EXPECT_NEAR(p.steps[1].a2a_seconds, 0.06e-3, 1e-15);
}

TEST(LinaPacking, EqualTimesStop) {
  LinaPackingInput in = packing_input();
  in.flops = 1e10 / 0.32e-3;  // FFN micro-op exactly as long as the first A2A micro-op
  const LinaPacking p = lina_pack_experts(in);
  EXPECT_EQ(p.experts_per_device, 1);
}

TEST(LinaPacking, StopsAtAllExpertsOnOneDevice) {
  LinaPackingInput in = packing_input();
  in.flops = 1e18;  // FFN 10 ns: only a local "A2A" (group 1, 0 s) is covered
  const LinaPacking p = lina_pack_experts(in);
  EXPECT_EQ(p.experts_per_device, 8);
  EXPECT_EQ(p.ep_group, 1);
  EXPECT_EQ(p.steps.size(), 4u);  // 1, 2, 4, 8
}

TEST(LinaPacking, StartsAtExpertsOverEpAndRespectsTheCap) {
  LinaPackingInput in = packing_input();
  in.experts = 16;  // 2 per device to start with, group of 8
  in.flops = 1e18;
  in.max_experts_per_device = 4;
  const LinaPacking p = lina_pack_experts(in);
  EXPECT_EQ(p.steps.front().experts_per_device, 2);
  EXPECT_EQ(p.experts_per_device, 4);
  EXPECT_EQ(p.ep_group, 4);
}

TEST(LinaPacking, StopsWhenTheNextGroupWouldNotAlign) {
  LinaPackingInput in = packing_input();
  in.experts = 12;
  in.ep = 12;
  in.levels = {{3, 12.5e9, 0.0}, {4, 100e9, 0.0}};  // 6 ranks would straddle nodes of 4
  in.flops = 1e18;
  EXPECT_EQ(lina_pack_experts(in).experts_per_device, 1);
}

TEST(LinaBackward, ByHand) {
  // A2A 10 ms, FFN 2 ms, five 4 ms AllReduce micro-ops pending.
  const LinaBackwardInput in{10e-3, 2e-3, {4e-3, 4e-3, 4e-3, 4e-3, 4e-3}};
  // Fair share: first A2A at half speed 20 ms (AllReduce 20 -> 10 ms left), FFN 2 ms (-> 8),
  // second A2A 2 x 8 shared + 2 alone = 18 ms. 40 ms.
  const LinaBackwardTimes fair = lina_backward_fair_share(in);
  EXPECT_NEAR(fair.layer_seconds, 40e-3, 1e-15);
  EXPECT_NEAR(fair.a2a_blocked_seconds, 38e-3, 1e-15);
  EXPECT_NEAR(fair.allreduce_left_seconds, 0.0, 1e-15);
  // A2A first: 10 ms; one micro-op starts in the 2 ms gap and ends at 4 ms; 10 ms. 24 ms,
  // four micro-ops (16 ms) left.
  const LinaBackwardTimes first = lina_backward_a2a_first(in);
  EXPECT_NEAR(first.layer_seconds, 24e-3, 1e-15);
  EXPECT_NEAR(first.a2a_blocked_seconds, 22e-3, 1e-15);
  EXPECT_NEAR(first.allreduce_left_seconds, 16e-3, 1e-15);
}

TEST(LinaBackward, ShortAllReduce) {
  const LinaBackwardInput in{10e-3, 2e-3, {3e-3}};
  // Fair share: 6 ms shared + 7 ms alone = 13 ms, FFN 2, A2A 10: 25 ms.
  EXPECT_NEAR(lina_backward_fair_share(in).layer_seconds, 25e-3, 1e-15);
  // A2A first: the 3 ms micro-op overruns the 2 ms gap by 1 ms: 23 ms.
  EXPECT_NEAR(lina_backward_a2a_first(in).layer_seconds, 23e-3, 1e-15);
  // Without an AllReduce both are A2A + FFN + A2A.
  const LinaBackwardInput alone{10e-3, 2e-3, {}};
  EXPECT_NEAR(lina_backward_fair_share(alone).layer_seconds, 22e-3, 1e-15);
  EXPECT_NEAR(lina_backward_a2a_first(alone).layer_seconds, 22e-3, 1e-15);
  // No gap: Lina starts no micro-op inside the layer.
  const LinaBackwardInput no_gap{10e-3, 0.0, {4e-3}};
  EXPECT_NEAR(lina_backward_a2a_first(no_gap).layer_seconds, 20e-3, 1e-15);
  EXPECT_NEAR(lina_backward_a2a_first(no_gap).allreduce_left_seconds, 4e-3, 1e-15);
}

TEST(LinaBackward, A2aFirstCostsAtMostOneMicroOpOverFairShare) {
  // A2A first: 2a + max(f, busy) <= 2a + f + longest micro-op; fair share >= 2a + f.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    LinaBackwardInput in{1e-2 * u(rng), 1e-2 * u(rng), {}};
    const int n = trial % 8;
    for (int i = 0; i < n; ++i) in.allreduce_microop_seconds.push_back(1e-4 + 5e-3 * u(rng));
    const double longest = n ? *std::max_element(in.allreduce_microop_seconds.begin(),
                                                 in.allreduce_microop_seconds.end())
                             : 0.0;
    const LinaBackwardTimes fair = lina_backward_fair_share(in);
    const LinaBackwardTimes first = lina_backward_a2a_first(in);
    EXPECT_GE(fair.layer_seconds, 2 * in.a2a_seconds + in.ffn_seconds - 1e-15);
    EXPECT_LE(first.layer_seconds, fair.layer_seconds + longest + 1e-15);
  }
}

TEST(LinaPlanner, BadInput) {
  EXPECT_ERROR_HAS(lina_allreduce_line(0, 1e9, 0), "lina planner", "ranks must be >= 1");
  EXPECT_ERROR_HAS(lina_allreduce_line(2, 0, 0), "bandwidth must be positive");
  EXPECT_ERROR_HAS(lina_allreduce_line(2, 1e9, -1), "latency must be >= 0");
  EXPECT_ERROR_HAS(lina_partition(1e300, 1.0), "more than 1e12 micro-ops");

  LinaPartitionInput p;
  p.allreduce = {-1.0, 1e-9};
  EXPECT_ERROR_HAS(lina_partition_bytes(p), "alpha and beta must be >= 0");
  p.allreduce = {0.0, 1e-9};
  p.min_bytes = 0;
  EXPECT_ERROR_HAS(lina_partition_bytes(p), "min partition bytes");
  p.min_bytes = 10e6;
  p.max_bytes = 5e6;
  EXPECT_ERROR_HAS(lina_partition_bytes(p), "max partition bytes");
  p.max_bytes = 50e6;
  p.gap_seconds = -1.0;
  EXPECT_ERROR_HAS(lina_partition_bytes(p), "gap seconds");

  EXPECT_ERROR_HAS(lina_partition(-1, 30e6), "tensor bytes");
  EXPECT_ERROR_HAS(lina_partition(1, 0), "partition bytes must be positive");

  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 2, {}), "at least one level");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 2, {{0, 1e9, 0}}), "level 0", "count");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 2, {{2, 0, 0}}), "level 0", "bandwidth");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 2, {{2, 1e9, -1}}), "level 0", "latency");
  EXPECT_ERROR_HAS(lina_a2a_seconds(-1, 2, kTwoNodes), "A2A bytes");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 0, kTwoNodes), "A2A group must be >= 1");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 16, kTwoNodes), "does not line up");
  EXPECT_ERROR_HAS(lina_a2a_seconds(1e6, 4, {{2, 1e9, 0}, {6, 1e9, 0}}), "does not line up");

  auto pack = [](auto f) {
    LinaPackingInput in = packing_input();
    f(in);
    return lina_pack_experts(in);
  };
  EXPECT_ERROR_HAS(pack([](auto& i) { i.experts = 0; }), "experts must be >= 1");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.ep = 3; }), "ep must be >= 1 and divide");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.microop_bytes = 0; }), "micro-op bytes");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.token_bytes = -1; }), "token bytes");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.ffn_flops_per_token = 0; }), "FFN flops per token");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.flops = 0; }), "device flops");
  EXPECT_ERROR_HAS(pack([](auto& i) {
                     i.experts = 16;
                     i.max_experts_per_device = 1;
                   }),
                   "max experts per device");
  EXPECT_ERROR_HAS(pack([](auto& i) { i.levels = {{3, 1e9, 0}}; }), "does not line up");

  EXPECT_ERROR_HAS(lina_backward_fair_share({-1, 0, {}}), "A2A seconds");
  EXPECT_ERROR_HAS(lina_backward_a2a_first({0, -1, {}}), "FFN seconds");
  EXPECT_ERROR_HAS(lina_backward_a2a_first({0, 0, {0.0}}), "micro-op must take positive time");
}

}  // namespace
}  // namespace moecomm::plan

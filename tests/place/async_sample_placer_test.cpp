#include "place/async_sample_placer.h"

#include <gtest/gtest.h>

#include <random>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

RoutingCounts random_counts(std::mt19937_64& rng, int samples, int experts) {
  RoutingCounts num(samples, experts);
  for (auto& v : num.num) v = static_cast<int64_t>(rng() % 50);
  return num;
}

// Algorithm 1's loop: submit after the gate, collect before the gather, layer after layer;
// each result is the synchronous placer's.
TEST(AsyncSamplePlacer, GivesTheSynchronousPlacementLayerAfterLayer) {
  std::mt19937_64 rng(2);
  const DeviceGrid grid{4, 8};
  const std::vector<int> experts = expert_blocks(64, 32);
  AsyncSamplePlacer async("flow");
  SamplePlacer sync("flow");
  for (int layer = 0; layer < 12; ++layer) {
    const RoutingCounts num = random_counts(rng, 128, 64);
    async.submit(num, experts, grid);
    const CollectedPlacement got = async.collect();
    const SamplePlacement want = sync.place(num, experts, grid);
    EXPECT_EQ(got.placement.sample_device, want.sample_device);
    EXPECT_EQ(got.placement.inter_node_tokens, want.inter_node_tokens);
    EXPECT_GT(got.placement.solve_us, 0.0);
    EXPECT_GE(got.wait_us, 0.0);
  }
}

TEST(AsyncSamplePlacer, ReportsMisuseAndSolverErrors) {
  AsyncSamplePlacer placer("flow");
  EXPECT_ERROR_HAS(placer.collect(), "nothing submitted");
  placer.submit(RoutingCounts(4, 2), {0, 1}, DeviceGrid{1, 2});
  EXPECT_ERROR_HAS(placer.submit(RoutingCounts(4, 2), {0, 1}, DeviceGrid{1, 2}),
                   "before collect()");
  EXPECT_NO_THROW(placer.collect());
  // Bad input fails at submit, before the worker, and leaves nothing pending.
  EXPECT_ERROR_HAS(placer.submit(RoutingCounts(4, 2), {0, 7}, DeviceGrid{1, 2}),
                   "expert_device[1]");
  RoutingCounts huge(4, 2);
  huge.at(2, 0) = huge.at(2, 1) = int64_t{1} << 62;  // the row sum passes 2^63
  EXPECT_ERROR_HAS(placer.submit(huge, {0, 1}, DeviceGrid{1, 2}), "num[2]",
                   "scale the counts down");
  EXPECT_ERROR_HAS(placer.collect(), "nothing submitted");
  placer.submit(RoutingCounts(4, 2), {0, 1}, DeviceGrid{1, 2});  // still usable
  EXPECT_EQ(placer.collect().placement.sample_device.size(), 4u);
}

}  // namespace
}  // namespace moecomm::place

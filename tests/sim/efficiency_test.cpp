// The cluster's measured efficiency curves in the simulator: a flow of a collective crossing a
// level moves at the level's bandwidth x the curve of that level and collective, read at the
// collective's message size (nccl-tests' size), piecewise-linear between the points.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

using sched::CollectiveSpec;
using sched::OpKind;
using sched::Schedule;

constexpr double kNodeBw = 10e9, kGpuBw = 1000e9;

// Two nodes of two GPUs, no latency: every collective here is bandwidth-bound.
core::Topology cluster(const std::map<std::string, std::map<std::string, core::CurvePoints>>& eff) {
  core::Cluster c;
  c.name = "test";
  c.levels = {{"node", 2, kNodeBw, 0.0}, {"gpu", 2, kGpuBw, 0.0}};
  c.device.flops = 100e12;
  c.device.memory_bandwidth = 1e12;
  c.efficiency = eff;
  return core::Topology(c);
}

CollectiveSpec uniform_a2a(const std::vector<int>& group, double pair) {
  CollectiveSpec spec;
  spec.kind = OpKind::kAllToAll;
  spec.group = group;
  const size_t n = group.size();
  spec.pair_bytes.assign(n * n, pair);
  for (size_t i = 0; i < n; ++i) spec.pair_bytes[i * n + i] = 0;
  spec.label.role = sched::OpRole::kDispatchA2A;
  return spec;
}

CollectiveSpec allreduce(const std::vector<int>& group, double bytes) {
  CollectiveSpec spec;
  spec.kind = OpKind::kAllReduce;
  spec.group = group;
  spec.bytes = bytes;
  spec.label.role = sched::OpRole::kGradDenseAllReduce;
  return spec;
}

SimResult run(const CollectiveSpec& spec, const core::Topology& topology) {
  Schedule s(topology.world_size());
  s.add_collective(spec, 0);
  SimOptions exact;
  exact.completion_tolerance = 0;
  return simulate(s, topology, exact);
}

TEST(SimEfficiency, HalfEfficiencyDoublesABandwidthBoundAllToAll) {
  // Node 0's egress carries 2 ranks x 2 remote peers x P: 4P / B_node; the NVLink flows
  // (P / B_gpu) end long before.
  constexpr double kPair = 1e8;
  const SimResult base = run(uniform_a2a({0, 1, 2, 3}, kPair), cluster({}));
  EXPECT_NEAR(base.makespan_s, 4 * kPair / kNodeBw, 1e-9 * base.makespan_s);
  const SimResult half =
      run(uniform_a2a({0, 1, 2, 3}, kPair), cluster({{"node", {{"alltoall", {{1e6, 0.5}}}}}}));
  EXPECT_NEAR(half.makespan_s, 2 * base.makespan_s, 1e-9 * base.makespan_s);
  // The counters count the bytes sent, not the time they held the links.
  EXPECT_EQ(half.bytes_by_level, base.bytes_by_level);
  EXPECT_DOUBLE_EQ(half.bytes_by_level[0], 2 * 4 * kPair);
  ASSERT_FALSE(half.busiest_links.empty());
  EXPECT_DOUBLE_EQ(half.busiest_links[0].bytes, 4 * kPair);
}

TEST(SimEfficiency, ACurveOfAnotherLevelOrCollectiveChangesNothing) {
  // Ranks 0 and 2 sit on different nodes: every flow crosses the node level.
  const auto a2a = uniform_a2a({0, 2}, 1e8);
  const double base = run(a2a, cluster({})).makespan_s;
  EXPECT_NEAR(base, 1e8 / kNodeBw, 1e-9 * base);
  EXPECT_EQ(run(a2a, cluster({{"gpu", {{"alltoall", {{1e6, 0.5}}}}}})).makespan_s, base);
  EXPECT_EQ(run(a2a, cluster({{"node", {{"allreduce", {{1e6, 0.5}}}}}})).makespan_s, base);
  EXPECT_EQ(run(a2a, cluster({{"node", {{"allgather", {{1e6, 0.5}}}}},
                              {"gpu", {{"alltoall", {{1e6, 0.1}}}}}}))
                .makespan_s,
            base);
}

TEST(SimEfficiency, TheCurveIsInterpolatedAtTheMessageSize) {
  // Points (1 MB, 0.25) and (3 MB, 0.75): 0.5 at 2 MB, held at the end points outside them.
  const auto topology = cluster({{"node", {{"alltoall", {{1e6, 0.25}, {3e6, 0.75}}}}}});
  // Two members on different nodes, P bytes each way: the per-rank send buffer is P.
  for (const auto& [pair, eff] : std::vector<std::pair<double, double>>{
           {2e6, 0.5}, {1.5e6, 0.375}, {0.5e6, 0.25}, {1e6, 0.25}, {3e6, 0.75}, {8e6, 0.75}}) {
    const double t = run(uniform_a2a({0, 2}, pair), topology).makespan_s;
    const double want = pair / (kNodeBw * eff);
    EXPECT_NEAR(t, want, 1e-9 * want) << pair;
  }
}

TEST(SimEfficiency, ARingAllReduceReadsItsCurveAtItsBuffer) {
  // Ring over the two nodes' first GPUs: each member sends 2(n-1)/n S = S to the other.
  constexpr double kBuffer = 4e8;
  const auto topology =
      cluster({{"node", {{"allreduce", {{1e8, 0.2}, {5e8, 0.6}}}, {"alltoall", {{1, 0.01}}}}}});
  const double eff = 0.2 + (kBuffer - 1e8) / (5e8 - 1e8) * 0.4;  // 0.5
  const double t = run(allreduce({0, 2}, kBuffer), topology).makespan_s;
  EXPECT_NEAR(t, kBuffer / (kNodeBw * eff), 1e-9 * t);
}

}  // namespace
}  // namespace moecomm::sim

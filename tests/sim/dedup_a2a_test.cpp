// a2a=dedup on the flow network: the bytes each level carries and the time, exact on a
// 2 nodes x 4 GPUs fixture against a hand count, and against the flat A2A of the same tokens.
#include <gtest/gtest.h>

#include "sched/dedup_traffic.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

core::Topology cluster() {
  core::Cluster c;
  c.name = "test";
  c.levels = {{"node", 2, 25e9, 0, 0}, {"gpu", 4, 200e9, 0, 0}};
  c.device.flops = 100e12;
  c.device.memory_bandwidth = 1e12;
  return core::Topology(c);
}

// 8 ranks, 8 experts top-2 (one per rank), `tokens` rows of `row` bytes per rank.
SimResult run(sched::Algorithm algorithm, sched::A2ADirection direction, double tokens,
              double row) {
  const core::RankGroup group = {0, 1, 2, 3, 4, 5, 6, 7};
  sched::Schedule s(8);
  sched::CollectiveSpec spec;
  spec.kind = sched::OpKind::kAllToAll;
  spec.group = group;
  spec.algorithm = algorithm;
  spec.direction = direction;
  spec.label.role = sched::OpRole::kDispatchA2A;
  if (algorithm == sched::Algorithm::kDedup) {
    const sched::DedupMatrices d = sched::dedup_matrices({8, 2, 1, 0}, group, 4, tokens * row);
    spec.pair_bytes = d.pair;
    spec.node_bytes = d.node;
  } else {
    spec.pair_bytes.assign(64, tokens * row * 2 / 8);  // one row per (token, expert)
  }
  s.add_collective(spec, 0);
  SimOptions exact;
  exact.completion_tolerance = 0;
  return simulate(s, cluster(), exact);
}

TEST(DedupA2A, EachLevelCarriesItsHandCount) {
  const double tokens = 1024, row = 4096;
  const double member = tokens * row * 0.25;       // 1 - C(7,2)/C(8,2)
  const double node = tokens * row * 22.0 / 28.0;  // 1 - C(4,2)/C(8,2)
  for (auto direction : {sched::A2ADirection::kDispatch, sched::A2ADirection::kCombine}) {
    const SimResult d = run(sched::Algorithm::kDedup, direction, tokens, row);
    ASSERT_EQ(d.bytes_by_level.size(), 2u);
    // Across nodes: each rank's tokens once, to its counterpart.
    EXPECT_NEAR(d.bytes_by_level[0], 8 * node, 1e-6 * node);
    // Inside: 3 on-node members straight, and the 3 other members of the far node's fan-out.
    EXPECT_NEAR(d.bytes_by_level[1], 8 * (3 * member + 3 * member), 1e-6 * member);
    // Time: the crossing (node bytes over 25 GB/s per node, 4 ranks' worth) then the fan-out.
    const double cross = 4 * node / 25e9, on_node = std::max(3 * member / 200e9, 0.0);
    const double fan = 3 * member / 200e9;
    EXPECT_NEAR(d.makespan_s, std::max(cross, on_node) + fan, 1e-9 * d.makespan_s);
  }
  const SimResult flat = run(sched::Algorithm::kFlat, sched::A2ADirection::kDispatch, tokens, row);
  const double pair = tokens * row * 2 / 8;
  EXPECT_NEAR(flat.bytes_by_level[0], 8 * 4 * pair, 1e-6 * pair);  // one row per (token, expert)
  EXPECT_LT(run(sched::Algorithm::kDedup, sched::A2ADirection::kDispatch, tokens, row).makespan_s,
            flat.makespan_s);
}

}  // namespace
}  // namespace moecomm::sim

// recompute_experts in simulation: the backward runs each expert op's forward again before its
// gradients, so with the knob on a backward expert op carries the flops it carries off plus
// those of the forward expert op of the same rows (2x + 1x the forward's), and the simulator
// prices it at exactly that: its duration is off's plus the forward's (up to the rounding of
// end - start in virtual time). Nothing else in the step changes its cost.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

sched::LayerSetup setup(const std::string& strategy) {
  sched::LayerSetup s;
  s.cluster.name = "2x2";
  s.cluster.levels = {{"node", 2, 1e9, 1e-6}, {"gpu", 2, 100e9, 1e-6}};
  s.cluster.device.flops = 1e14;
  s.cluster.device.memory_bandwidth = 1e15;
  s.model.name += "m";  // appended: assigning trips GCC 12 -O3 -Wrestrict
  s.model.hidden = 256;
  s.model.ffn_hidden = 512;
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.layers = 2;
  s.model.heads = 4;
  s.model.seq_len = 128;
  s.model.micro_batch = 2;
  s.model.dtype_bytes = 2;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=4", "-"), 4, 4, "-");
  s.strategy = sched::parse_strategy(strategy, "-");
  s.layers = 2;
  return s;
}

// Per (rank, layer, phase, chunk): its expert op's flops and simulated seconds.
using Key = std::tuple<int, int, sched::Phase, int>;
struct Expert {
  double flops = 0, seconds = 0;
};
std::map<Key, Expert> expert_ops(const std::string& strategy) {
  const sched::LayerSetup s = setup(strategy);
  const sched::Schedule schedule = sched::build_training_step(s);
  const SimResult r = simulate(schedule, core::Topology(s.cluster));
  std::map<Key, Expert> out;
  for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
    const sched::Label& l = schedule.label(id);
    if (l.role != sched::OpRole::kExpert) continue;
    const sched::Op& op = schedule.op(id);
    out[{op.rank, l.layer, l.phase, l.chunk}] = {op.flops,
                                                 r.ops[size_t(id)].end - r.ops[size_t(id)].start};
  }
  return out;
}

TEST(RecomputeExperts, BackwardExpertOpsTakeTheirForwardAgain) {
  // Unchunked, pipelined chunks (FSMoE's r, Lina's micro-ops), and experts waiting for every
  // chunk (MoNTA).
  for (const std::string base : {"base=baseline", "base=baseline,chunks=3", "base=lina,chunks=2",
                                 "base=baseline,chunks=2,pipeline_experts=false"}) {
    SCOPED_TRACE(base);
    const auto off = expert_ops(base);
    const auto on = expert_ops(base + ",recompute_experts=true");
    ASSERT_EQ(on.size(), off.size());
    int backward = 0;
    for (const auto& [key, op] : off) {
      const auto [rank, layer, phase, chunk] = key;
      ASSERT_TRUE(on.count(key));
      const Expert& now = on.at(key);
      if (phase == sched::Phase::kForward) {
        EXPECT_EQ(now.flops, op.flops);
        EXPECT_DOUBLE_EQ(now.seconds, op.seconds);
        continue;
      }
      const Expert& forward = off.at({rank, layer, sched::Phase::kForward, chunk});
      ASSERT_GT(forward.flops, 0);
      EXPECT_EQ(op.flops, 2 * forward.flops);
      EXPECT_EQ(now.flops, 3 * forward.flops);
      EXPECT_EQ(now.flops, op.flops + forward.flops);
      EXPECT_NEAR(now.seconds, op.seconds + forward.seconds, 1e-12 * now.seconds);
      ++backward;
    }
    EXPECT_GT(backward, 0);
  }
}

// The knob is a memory knob: it slows the step by the recomputation and changes no
// communication.
TEST(RecomputeExperts, SlowsTheStepAndMovesTheSameBytes) {
  const sched::LayerSetup off = setup("baseline"), on = setup("recompute_experts=true");
  const SimResult a = simulate(sched::build_training_step(off), core::Topology(off.cluster));
  const SimResult b = simulate(sched::build_training_step(on), core::Topology(on.cluster));
  EXPECT_GT(b.makespan_s, a.makespan_s);
  EXPECT_EQ(b.bytes_by_level, a.bytes_by_level);
  EXPECT_EQ(b.flows, a.flows);
}

}  // namespace
}  // namespace moecomm::sim

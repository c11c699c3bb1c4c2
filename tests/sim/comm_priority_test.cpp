// MoNTA's "Communication priority" in simulation: with comm_priority=monta the EP A2As of the
// backward go before the DP gradient AllReduces that share their links, so they take exactly
// as long as the forward's A2As of the same bytes, which run alone; with fair sharing, or on
// a network without priorities, the gradients prolong them.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/rank_groups.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

sched::LayerSetup setup(const std::string& strategy, bool network_priorities = true) {
  sched::LayerSetup s;
  s.cluster.network_priorities = network_priorities;
  s.cluster.name = "2x2";
  s.cluster.levels = {{"node", 2, 1e9, 1e-6}, {"gpu", 2, 100e9, 1e-6}};
  s.cluster.device.flops = 1e15;
  s.cluster.device.memory_bandwidth = 1e15;
  s.model.name += "m";  // appended: assigning trips GCC 12 -O3 -Wrestrict
  s.model.hidden = 512;
  s.model.ffn_hidden = 1024;
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.layers = 2;
  s.model.heads = 8;
  s.model.seq_len = 256;
  s.model.micro_batch = 4;
  s.model.dtype_bytes = 4;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=4", "-"), 4, 4, "-");
  s.strategy = sched::parse_strategy(strategy, "-");
  s.layers = 2;
  return s;
}

// Rank 0's dispatch A2A durations of layer 0: {forward, backward}.
std::pair<double, double> layer0_a2a(const std::string& strategy, bool priorities = true) {
  const sched::Schedule s = sched::build_training_step(setup(strategy, priorities));
  const SimResult r = simulate(s, core::Topology(setup(strategy, priorities).cluster));
  double fwd = 0, bwd = 0;
  for (sched::OpId id : s.ops_of(0)) {
    const sched::Label& l = s.label(id);
    if (l.role != sched::OpRole::kDispatchA2A || l.layer != 0) continue;
    (l.phase == sched::Phase::kForward ? fwd : bwd) = r.ops[id].end - r.ops[id].start;
  }
  return {fwd, bwd};
}

TEST(CommPriority, MontaServesTheBackwardA2ABeforeTheGradientsSharingItsLinks) {
  const auto [fwd, bwd] = layer0_a2a("comm_priority=monta");
  ASSERT_GT(fwd, 0);
  EXPECT_NEAR(bwd, fwd, 1e-12 * fwd);
  const auto [fair_fwd, fair_bwd] = layer0_a2a("baseline");
  EXPECT_DOUBLE_EQ(fair_fwd, fwd);
  EXPECT_GT(fair_bwd, fwd * 1.05);  // layer 1's gradient AllReduce shares the node links
}

// A network without traffic classes (MPI over TCP: network_priorities false, as `moecomm
// profile` writes it) serves MoNTA's A2A like any flow: exactly the fair-sharing times.
TEST(CommPriority, ANetworkWithoutPrioritiesSharesLinksFairlyWhateverTheKnob) {
  const auto [fwd, bwd] = layer0_a2a("comm_priority=monta", false);
  const auto [fair_fwd, fair_bwd] = layer0_a2a("baseline", false);
  EXPECT_DOUBLE_EQ(fwd, fair_fwd);
  EXPECT_DOUBLE_EQ(bwd, fair_bwd);
  EXPECT_GT(bwd, fwd * 1.05);
}

}  // namespace
}  // namespace moecomm::sim

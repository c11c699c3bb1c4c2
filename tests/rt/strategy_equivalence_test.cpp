// Every strategy the hand-built runtime runs must train like the baseline: over 2 logical
// nodes, the loss at every step and every gradient after 3 steps equal the baseline's within
// 1e-5 in fp32. The baseline is the same parallel layout with the plain EP A2A. Each case
// prints its token-path bytes by level against the baseline's (for the note). Tensor
// parallelism runs on the schedule runtime (scheduled_train_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "core/topology.h"
#include "mpi_test_util.h"
#include "nn/tensor.h"
#include "rt/train_loop.h"
#include "sched/build_hybridep.h"
#include "sched/strategy.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

TrainConfig tiny(int tp, const std::string& strategy) {
  return test::tiny_train(tp, strategy);
}

using test::expect_same_training;

void report(const std::string& name, int tp, const StepReport& b, const StepReport& r) {
  if (test::world_rank() != 0) return;
  std::cout << "np " << test::world_size() << " tp " << tp << " " << name
            << ": token-path bytes per step inter-node " << r.a2a[LinkLevel::kInterNode]
            << " (baseline " << b.a2a[LinkLevel::kInterNode] << "), intra-node "
            << r.a2a[LinkLevel::kIntraNode] << " (baseline " << b.a2a[LinkLevel::kIntraNode]
            << "); expert transfers inter-node " << r.expert[LinkLevel::kInterNode]
            << ", intra-node " << r.expert[LinkLevel::kIntraNode] << "; gradient micro-ops "
            << r.grad_sync.micro_ops << ", overlapping an A2A " << r.grad_sync.overlap_s * 1e3
            << " rank-ms\n";
}

void check_strategies(int tp, const std::vector<std::string>& strategies) {
  const TrainResult base = train(tiny(tp, "baseline"));
  for (const std::string& s : strategies) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " " + s);
    const TrainResult run = train(tiny(tp, s));
    expect_same_training(base, run);
    report(s, tp, base.steps.back(), run.steps.back());
  }
}

TEST(StrategyEquivalence, ExpertParallelStrategiesTrainLikeTheBaseline) {
  check_strategies(1, {
                          "hier-a2a",                              // Tutel 2DH
                          "base=baseline,a2a=1dh",                 // HetuMoE 1DH
                          "base=fsmoe,tp_dispatch=replicate",      // FSMoE r=4, windows
                          "base=fsmoe,chunks_fwd=3,chunks_bwd=2",  // r apart per phase
                          "lina",                                  // A2A first, micro-ops
                          "base=lina,a2a=2dh,chunks=3,grad_partitions=5",
                          "base=baseline,grad_sync=fsmoe,grad_partitions=3",
                      });
}

// HybridEP with experts sent as they are (compression 1): every domain size that divides the
// EP group trains like plain EP (domain 1 is plain EP; domain = world gathers every expert
// and moves no token).
TEST(StrategyEquivalence, HybridEpDomainsTrainLikeTheBaseline) {
  std::vector<std::string> strategies;
  for (int domain = 1; domain <= test::world_size(); domain *= 2)
    strategies.push_back("base=hybridep,hybrid_domain=" + std::to_string(domain));
  strategies.push_back("base=hybridep,hybrid_domain=2,grad_sync=lina,chunks=2");
  check_strategies(1, strategies);
}

// Per-level domains (hybrid_levels=2x1 on 2 nodes: each rank pairs with the rank of equal
// index on the other node) renumber the experts' owners: the rank at position p of the
// member order owns experts [p L, (p + 1) L). Its expert gradients must equal those of the
// baseline's rank p, and the dense ones and the losses this rank's.
TEST(StrategyEquivalence, HybridEpPerLevelDomainsTrainLikeTheBaseline) {
  const int n = test::world_size(), me = test::world_rank();
  core::Cluster cluster;
  cluster.levels = {{"node", 2, 1e9, 1e-6}, {"gpu", n / 2, 1e10, 1e-6}};
  cluster.device = {1e12, 1e9, 1e10};
  const std::vector<int> order =
      sched::hybrid_member_order(core::Topology(cluster), test::all_ranks(), {2, 1}, "test");
  const TrainResult base = train(tiny(1, "baseline"));
  for (const Runtime runtime : {Runtime::kHandBuilt, Runtime::kSchedule}) {
    SCOPED_TRACE(runtime == Runtime::kSchedule ? "schedule runtime" : "hand-built runtime");
    TrainConfig c = tiny(1, "base=hybridep,hybrid_levels=2x1,compression=1");
    c.hybrid_order = order;
    c.cluster = cluster;
    c.runtime = runtime;
    const TrainResult run = train(c);
    ASSERT_EQ(run.steps.size(), base.steps.size());
    for (size_t s = 0; s < base.steps.size(); ++s)
      EXPECT_NEAR(run.steps[s].loss, base.steps[s].loss, 1e-5);
    // My experts' gradients go to the baseline rank that owns them (my position).
    const int position = int(std::find(order.begin(), order.end(), me) - order.begin());
    std::vector<float> mine, theirs;
    std::vector<std::string> names;
    for (const auto& [name, g] : run.gradients) {
      if (name.find(".expert") == std::string::npos) continue;
      mine.insert(mine.end(), g.data(), g.data() + g.size());
    }
    for (const auto& [name, g] : base.gradients) {
      if (name.find(".expert") == std::string::npos) continue;
      names.push_back(name);
      theirs.insert(theirs.end(), g.data(), g.data() + g.size());
    }
    ASSERT_EQ(mine.size(), theirs.size());
    std::vector<float> got(mine.size());
    MPI_Sendrecv(mine.data(), int(mine.size()), MPI_FLOAT, position, 0, got.data(), int(got.size()),
                 MPI_FLOAT, order[size_t(me)], 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - theirs[i]));
    EXPECT_LE(worst, 1e-5f) << "expert gradients of rank " << me << " (" << names.front() << "...)";
    for (size_t g = 0; g < base.gradients.size(); ++g) {
      if (base.gradients[g].first.find(".expert") != std::string::npos) continue;
      ASSERT_EQ(run.gradients[g].first, base.gradients[g].first);
      EXPECT_LE(nn::max_abs_diff(run.gradients[g].second, base.gradients[g].second), 1e-5f)
          << base.gradients[g].first;
    }
    report("base=hybridep,hybrid_levels=2x1", 1, base.steps.back(), run.steps.back());
  }
}

}  // namespace
}  // namespace moecomm::rt

// HybridEP's per-level domains train like plain EP: the member order renumbers the experts'
// owners, yet every loss and every gradient (each expert's at its owner) equals the
// baseline's within 1e-5 in fp32. The other strategies' equivalence tests are in
// scheduled_train_test.cpp and netmoe_runtime_test.cpp.
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
  {
    TrainConfig c = tiny(1, "base=hybridep,hybrid_levels=2x1,compression=1");
    c.hybrid_order = order;
    c.cluster = cluster;
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
  }
}

}  // namespace
}  // namespace moecomm::rt

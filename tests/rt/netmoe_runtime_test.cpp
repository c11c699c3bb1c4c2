// placement=netmoe in `moecomm train`, on the schedule runtime (rt/netmoe_binding.h): over 2
// logical nodes, samples move to the placement's ranks at every MoE layer's gather, yet
// training equals the baseline's: the loss at every step, each sample's loss (matched by
// global sample id) and every gradient after 3 steps within 1e-5 in fp32. On data whose
// samples keep to few experts (routing with locality), its inter-node token bytes are below
// the baseline's.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "../support/expect_error.h"
#include "mpi_test_util.h"
#include "nn/tensor.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

// tiny_train (tiny_train.h) at tp = 1, dropless, with the default aux loss weight: the
// load-balancing loss is computed per home rank wherever the samples sit, as the baseline's.
TrainConfig tiny(const std::string& strategy) {
  return test::tiny_train(1, strategy);
}

// Text in blocks of 64 tokens, each block drawn from one band of 4 token ids: a window of
// 16 mostly stays in one band, so a sample's tokens route to few experts.
std::vector<int> banded_corpus() {
  std::vector<int> corpus;
  uint64_t h = 7;
  for (int block = 0; block < 64; ++block)
    for (int t = 0; t < 64; ++t) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      corpus.push_back(4 * (block * 5 % 16) + static_cast<int>(h >> 62));
    }
  return corpus;
}

void print_bytes(const std::string& what, const StepReport& base, const StepReport& run) {
  if (test::world_rank() != 0) return;
  std::cout << "np " << test::world_size() << " netmoe " << what << ": token rows inter-node "
            << run.a2a[LinkLevel::kInterNode] << " B (baseline " << base.a2a[LinkLevel::kInterNode]
            << "), intra-node " << run.a2a[LinkLevel::kIntraNode] << " (baseline "
            << base.a2a[LinkLevel::kIntraNode] << "); metadata inter-node "
            << run.a2a_meta[LinkLevel::kInterNode] << ", intra-node "
            << run.a2a_meta[LinkLevel::kIntraNode] << "; solve " << run.placement_solve_ms
            << " ms, waited " << run.placement_wait_ms << " ms\n";
}

// Alone, with the 2DH A2A, with experts that wait for every chunk, and under FSMoE's and
// Lina's chunks (forward and backward degrees apart) and gradient scheduling.
TEST(NetMoe, TrainsLikeTheBaselineWithSamplesMoved) {
  const TrainResult base = train(tiny("baseline"));
  const int batch = tiny("baseline").batch;
  for (const std::string s : {
           "netmoe",
           "base=netmoe,a2a=2dh",
           "base=netmoe,a2a=pairwise",
           "base=netmoe,grad_sync=lina,grad_partitions=3",
           "base=netmoe,chunks_fwd=4,chunks_bwd=3,grad_sync=fsmoe,grad_partitions=4",
           "base=lina,placement=netmoe",
           "base=netmoe,chunks=2,pipeline_experts=false",
       }) {
    SCOPED_TRACE(s);
    const TrainResult run = train(tiny(s));
    test::expect_same_training(base, run);
    ASSERT_EQ(run.sample_losses.size(), base.sample_losses.size());
    int moved = 0;
    for (size_t i = 0; i < base.sample_losses.size(); ++i) {
      EXPECT_NEAR(run.sample_losses[i], base.sample_losses[i], 1e-5) << "sample " << i;
      EXPECT_EQ(base.sample_rank[i], static_cast<int>(i) / batch);
      moved += run.sample_rank[i] != static_cast<int>(i) / batch;
    }
    EXPECT_GT(moved, 0) << "no sample changed rank";
    // The baseline's layout counts; NetMoE's counts, aux sums, targets and metadata columns.
    EXPECT_GT(run.steps.back().a2a_meta.total(), base.steps.back().a2a_meta.total());
    if (s.find("2dh") == std::string::npos) {  // the same rows over the flat A2A's links
      EXPECT_EQ(run.steps.back().a2a.total(), base.steps.back().a2a.total());
    }
    EXPECT_GT(run.steps.back().placement_solve_ms, 0.0);
    print_bytes("(" + s + ", " + std::to_string(moved) + " samples moved)", base.steps.back(),
                run.steps.back());
  }
}

// recompute_experts with moved samples: the expert side recomputes the forward's chunks in the
// backward, and the run is the one that keeps the activations, to the bit.
TEST(NetMoe, RecomputedExpertsTrainBitForBitLikeKeptOnes) {
  for (const std::string s : {"base=netmoe", "base=netmoe,chunks_fwd=4,chunks_bwd=3",
                              "base=netmoe,chunks=2,pipeline_experts=false"}) {
    SCOPED_TRACE(s);
    const TrainResult kept = train(tiny(s)), run = train(tiny(s + ",recompute_experts=true"));
    test::expect_identical_training(kept, run);
    EXPECT_EQ(run.sample_losses, kept.sample_losses);
  }
}

TEST(NetMoe, CutsInterNodeBytesOnRoutingWithLocality) {
  TrainConfig b = tiny("baseline"), n = tiny("netmoe");
  b.corpus = n.corpus = banded_corpus();
  b.steps = n.steps = 1;
  const TrainResult base = train(b);
  const TrainResult run = train(n);
  EXPECT_NEAR(run.steps[0].loss, base.steps[0].loss, 1e-5);
  EXPECT_LT(run.steps[0].a2a[LinkLevel::kInterNode], base.steps[0].a2a[LinkLevel::kInterNode]);
  EXPECT_EQ(run.steps[0].a2a.total(), base.steps[0].a2a.total());  // same rows, other links
  print_bytes("(banded text)", base.steps[0], run.steps[0]);
}

TEST(NetMoe, RefusesWhatItCannotRun) {
  TrainConfig c = tiny("netmoe");
  c.model.moe.capacity_factor = 1.25f;
  EXPECT_ERROR_HAS(train(c), "placement=netmoe", "dropless");
  c = tiny("netmoe");
  c.tp = 2;
  EXPECT_ERROR_HAS(train(c), "strategy: tp: placement=netmoe runs with tp=1 only, got tp=2");
  c = tiny("netmoe");
  c.model.moe.gate = nn::GateKind::kExpertChoice;
  EXPECT_ERROR_HAS(train(c), "token-choice");
  c = tiny("netmoe");
  c.record_routing = true;
  EXPECT_ERROR_HAS(train(c), "--record-routing: placement=netmoe does not record routing yet");
  // Every op of this schedule has a role the runtime knows, but NetMoeBinding moves samples,
  // not experts: the ops are refused by role, layer, phase and knob (sched/executor_caps.h).
  c = tiny("base=netmoe,expert_transfer=hybrid");
  EXPECT_ERROR_HAS(train(c),
                   "strategy: the schedule runtime cannot bind moe.hybrid.expert_allgather "
                   "[layer 0, forward, knob hybrid], moe.hybrid.grad_reducescatter [layer 0, "
                   "backward, knob hybrid] (placement=netmoe moves whole samples over the EP "
                   "group: no ESP split, no TP gather, no expert transfer)");
}

}  // namespace
}  // namespace moecomm::rt

// A step of M micro-batches on pipeline stages trains as one batch on one stage: the per-step
// losses of `micro_batches` M x `batch` b equal those of 1 x M b, and pp 2 equals pp 1, within
// 1e-5 over 3 steps (the later steps' losses follow Adam's updates, so the summed gradients are
// checked too). The layout is dropless and the auxiliary loss weight 0: the capacity and the
// load-balancing loss are taken per micro-batch, so they differ from one batch's by design.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "mpi_test_util.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

TrainConfig tiny(int tp, const std::string& strategy, int pp, int micro_batches, int batch) {
  TrainConfig c = test::tiny_train(tp, strategy);
  c.model.heads = 4;  // shards over tp = 4
  c.model.aux_loss_weight = 0.0f;
  c.keep_gradients = false;  // a pipeline stage holds only its blocks' gradients
  c.pp = pp;
  c.micro_batches = micro_batches;
  c.batch = batch;
  return c;
}

void expect_same_losses(const TrainResult& base, const TrainResult& run, const std::string& what) {
  ASSERT_EQ(run.steps.size(), base.steps.size()) << what;
  for (size_t s = 0; s < base.steps.size(); ++s) {
    EXPECT_NEAR(run.steps[s].loss, base.steps[s].loss, 1e-5) << what << ", step " << s + 1;
    EXPECT_NEAR(run.steps[s].lm_loss, base.steps[s].lm_loss, 1e-5) << what << ", step " << s + 1;
  }
}

// Two stages of one block each run the same model on the same data as one stage of two
// blocks: the residual stream and its gradient cross between them as the schedule's p2p ops.
// A pipeline's stages share one data rank, so the one-stage run that sees the same data has as
// many data ranks: the same ranks with a TP group as large as a pipeline's (the baseline, whose
// TP equals tp = 1 within 1e-5 in scheduled_train_test.cpp).
TEST(PipelineTrain, TwoStagesTrainLikeOne) {
  const int world = test::world_size();
  const TrainResult tp2 = train(tiny(2, "baseline", 1, 1, 2));
  const TrainResult tp4 = train(tiny(4, "baseline", 1, 1, 2));
  for (const auto& [strategy, tp] : {std::pair{"baseline", 1},
                                     {"hier-a2a", 1},
                                     {"lina", 1},
                                     {"hybridep", 1},
                                     {"netmoe", 1},
                                     {"monta-o1", 2},
                                     {"monta-o3", 2},
                                     {"fsmoe", 2}}) {
    const TrainResult run = train(tiny(tp, strategy, 2, 1, 2));
    expect_same_losses(tp == 1 ? tp2 : tp4, run,
                       std::string(strategy) + " pp 2 vs pp 1 (np " + std::to_string(world) + ")");
  }
}

// M micro-batches of b sequences train as one of M b: the gradients summed over the
// micro-batches (and synced once) and scaled by 1 / M give Adam the same step, at one stage
// and at two (np 4: pp 2 runs two data ranks, np 8: four), under GPipe and 1F1B.
TEST(PipelineTrain, MicroBatchesTrainLikeOneBatch) {
  // Every strategy. HybridEP's experts travel once per step: the micro-batches' models share
  // the gathered copies and sum the copies' gradients. NetMoE's stages hand on the ids of the
  // samples their rows hold.
  for (const auto& [strategy, tp, pp] : {std::tuple{"baseline", 1, 1},
                                         {"hier-a2a", 1, 1},
                                         {"lina", 1, 1},
                                         {"netmoe", 1, 1},
                                         {"hybridep", 1, 1},
                                         {"base=hybridep,compression=0.5,sr_feedback=true", 1, 1},
                                         {"monta-o1", 2, 1},
                                         {"monta-o2", 2, 1},
                                         {"monta-o3", 2, 1},
                                         {"fsmoe", 2, 1},
                                         {"base=baseline,overlap_microbatches=true", 1, 1},
                                         {"base=fsmoe,a2a=dedup", 1, 1},
                                         {"baseline", 1, 2},
                                         {"hier-a2a", 1, 2},
                                         {"lina", 1, 2},
                                         {"hybridep", 1, 2},
                                         {"netmoe", 1, 2},
                                         {"monta-o1", 2, 2},
                                         {"monta-o2", 2, 2},
                                         {"monta-o3", 2, 2},
                                         {"fsmoe", 2, 2},
                                         {"base=lina,overlap_microbatches=true", 1, 2},
                                         {"base=fsmoe,a2a=dedup", 1, 2}}) {
    const TrainResult one = train(tiny(tp, strategy, pp, 1, 4));
    for (const char* schedule : {"gpipe", "1f1b"}) {
      TrainConfig c = tiny(tp, strategy, pp, 2, 2);
      sched::parse_pp_schedule(c.strategy, schedule, "test");
      expect_same_losses(one, train(c),
                         std::string(strategy) + " pp " + std::to_string(pp) + " " + schedule +
                             ": 2 x 2 vs 1 x 4 sequences");
    }
  }
}

}  // namespace
}  // namespace moecomm::rt

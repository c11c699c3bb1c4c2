#pragma once
// The small training run the runtime's equivalence tests compare strategies on: a 2-layer
// MoE LM, 2 experts per rank, dropless, 3 steps, over 2 logical nodes (a TP group of 2 stays
// in one), keeping the last step's gradients.
#include <gtest/gtest.h>

#include <string>

#include "mpi_test_util.h"
#include "nn/tensor.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"

namespace moecomm::rt::test {

inline TrainConfig tiny_train(int tp, const std::string& strategy) {
  TrainConfig c;
  const int world = world_size();
  c.model.vocab = 64;
  c.model.max_seq = 16;
  c.model.hidden = 32;
  c.model.heads = 2;
  c.model.layers = 2;
  c.model.moe.ffn_hidden = 48;
  c.model.moe.experts = 2 * world;
  c.model.moe.top_k = 2;
  c.model.moe.capacity_factor = 0.0f;  // dropless (NetMoE inlines the residual on slot 0)
  c.tp = tp;
  c.batch = 2;
  c.seq_len = 16;
  c.steps = 3;
  c.ranks_per_node = world / 2;
  c.timeout_s = kTimeout;
  c.strategy = sched::parse_strategy(strategy, "test");
  c.keep_gradients = true;
  return c;
}

// The loss at every step and every gradient of the last step within 1e-5 (fp32).
inline void expect_same_training(const TrainResult& base, const TrainResult& run) {
  ASSERT_EQ(run.steps.size(), base.steps.size());
  for (size_t s = 0; s < base.steps.size(); ++s) {
    EXPECT_NEAR(run.steps[s].loss, base.steps[s].loss, 1e-5) << "step " << s + 1;
    EXPECT_NEAR(run.steps[s].lm_loss, base.steps[s].lm_loss, 1e-5) << "step " << s + 1;
  }
  ASSERT_EQ(run.gradients.size(), base.gradients.size());
  for (size_t g = 0; g < base.gradients.size(); ++g) {
    ASSERT_EQ(run.gradients[g].first, base.gradients[g].first);
    EXPECT_LE(nn::max_abs_diff(run.gradients[g].second, base.gradients[g].second), 1e-5f)
        << base.gradients[g].first;
  }
}

// The same numbers to the bit: every loss and every gradient of the last step (for a knob
// that changes what is kept, not what is computed, such as recompute_experts).
inline void expect_identical_training(const TrainResult& base, const TrainResult& run) {
  ASSERT_EQ(run.steps.size(), base.steps.size());
  for (size_t s = 0; s < base.steps.size(); ++s) {
    EXPECT_EQ(run.steps[s].loss, base.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(run.steps[s].lm_loss, base.steps[s].lm_loss) << "step " << s + 1;
  }
  ASSERT_EQ(run.gradients.size(), base.gradients.size());
  for (size_t g = 0; g < base.gradients.size(); ++g) {
    ASSERT_EQ(run.gradients[g].first, base.gradients[g].first);
    EXPECT_EQ(nn::max_abs_diff(run.gradients[g].second, base.gradients[g].second), 0.0f)
        << base.gradients[g].first;
  }
}

}  // namespace moecomm::rt::test

#include "cli/model_step_probe.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::cli {
namespace {

// `profile --model` times the forward and the backward apart, so it needs the simulator's
// flops of each phase: a backward GEMM pair (input and weight gradients) is twice its forward.
TEST(ModelStepProbe, SplitsTheSimulatedStepFlopsByPhase) {
  const rt::ModelStepProbe probe = model_step_probe("tiny", 4, 2, 16);
  EXPECT_GT(probe.forward_flops, 0);
  EXPECT_DOUBLE_EQ(probe.backward_flops, 2 * probe.forward_flops);
  EXPECT_EQ(probe.model.moe.experts, 2);  // tiny: 2 experts per rank, the rank's share
  EXPECT_EQ(probe.batch, 2);
  EXPECT_EQ(probe.seq_len, 16);
  // Twice the batch, twice the flops of each phase (the tiny model's attention is over
  // sequences of the same length).
  const rt::ModelStepProbe twice = model_step_probe("tiny", 4, 4, 16);
  EXPECT_DOUBLE_EQ(twice.forward_flops, 2 * probe.forward_flops);
}

TEST(ModelStepProbe, NamesTheModelWhenTheExpertsDoNotSplit) {
  EXPECT_ERROR_HAS(model_step_probe("testbed-hybridep", 3, 2, 16), "--model", "over 3 ranks");
}

}  // namespace
}  // namespace moecomm::cli

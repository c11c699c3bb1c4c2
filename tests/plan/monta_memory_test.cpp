#include "plan/monta_memory.h"

#include <gtest/gtest.h>

#include <limits>

#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

// P1 = 2e9, P2 = 64e9 over p = 2, t = 8, e = 2: a device holds 2e9 / 16 = 1.25e8 dense and
// 64e9 / 32 = 2e9 expert parameters.
WeightMemoryInputs weights_example(int zero_stage, int dense_dp, int expert_dp) {
  return {2e9, 64e9, 2, 8, 2, dense_dp, expert_dp, zero_stage};
}

TEST(MontaMemory, WeightsPerZeroStage) {
  WeightMemory m = weight_memory(weights_example(0, 2, 4));
  EXPECT_DOUBLE_EQ(m.dense_bytes, 16 * 1.25e8);
  EXPECT_DOUBLE_EQ(m.moe_bytes, 16 * 2e9);
  m = weight_memory(weights_example(1, 2, 4));
  EXPECT_DOUBLE_EQ(m.dense_bytes, (4 + 6) * 1.25e8);  // 4 + 12/2
  EXPECT_DOUBLE_EQ(m.moe_bytes, (4 + 3) * 2e9);       // 4 + 12/4
  m = weight_memory(weights_example(2, 2, 4));
  EXPECT_DOUBLE_EQ(m.dense_bytes, (2 + 7) * 1.25e8);  // 2 + 14/2
  EXPECT_DOUBLE_EQ(m.moe_bytes, (2 + 3.5) * 2e9);     // 2 + 14/4
  m = weight_memory(weights_example(3, 2, 4));
  EXPECT_DOUBLE_EQ(m.dense_bytes, 8 * 1.25e8);  // 16/2
  EXPECT_DOUBLE_EQ(m.moe_bytes, 4 * 2e9);       // 16/4
  EXPECT_DOUBLE_EQ(m.total(), 1e9 + 8e9);
  // Without data parallelism ZeRO changes nothing.
  for (int stage = 1; stage <= 3; ++stage)
    EXPECT_DOUBLE_EQ(model_state_bytes_per_param(stage, 1), 16.0);
}

// b = 1, s = h = 4096, a = 32, l = 32, k = 2, ffn = 4h, t = 4: b s h l = 2^29, and the
// attention-score term is 5 a s / (h t) = 40.
ActivationInputs act_example(bool sp, Recompute r) {
  return {1, 4096, 4096, 32, 32, 4 * 4096, 2, 4, sp, r};
}

TEST(MontaMemory, ActivationsHandComputed) {
  const double bshl = 536870912.0;  // 2^29
  // TP: attention 5 + 8/4 = 7, each expert copy 5 + 16/4 = 9, scores 40: 7 + 2 x 9 + 40.
  EXPECT_DOUBLE_EQ(activation_memory(act_example(false, Recompute::kNone)), 65 * bshl);
  EXPECT_DOUBLE_EQ(activation_memory(act_example(false, Recompute::kSelective)), 25 * bshl);
  // TP + SP: (13 + 21 x 2) / 4 + 40.
  EXPECT_DOUBLE_EQ(activation_memory(act_example(true, Recompute::kNone)), 53.75 * bshl);
  // Table 4 row 4: (13 + 21k) / t.
  EXPECT_DOUBLE_EQ(activation_memory(act_example(true, Recompute::kSelective)), 13.75 * bshl);
  // Table 4 row 5: 2 bshl / t; without SP the layer inputs are replicated: 2 bshl.
  EXPECT_DOUBLE_EQ(activation_memory(act_example(true, Recompute::kFull)), 0.5 * bshl);
  EXPECT_DOUBLE_EQ(activation_memory(act_example(false, Recompute::kFull)), 2 * bshl);
}

// recompute_experts keeps each expert copy's 5 (LayerNorm input, FFN input, dropout mask) and
// drops its 4 ffn / h (the GeLU's input and output), which the backward recomputes.
TEST(MontaMemory, RecomputedExpertsDropTheirInnerActivations) {
  const double bshl = 536870912.0;  // 2^29
  auto with = [](bool sp, Recompute r) {
    ActivationInputs in = act_example(sp, r);
    in.recompute_experts = true;
    return in;
  };
  // TP: 7 + 2 x 5 + 40 (9 per copy without the knob: 65).
  EXPECT_DOUBLE_EQ(activation_memory(with(false, Recompute::kNone)), 57 * bshl);
  EXPECT_DOUBLE_EQ(activation_memory(with(false, Recompute::kSelective)), 17 * bshl);
  // TP + SP: (13 + 5 x 2) / 4 + 40 and (13 + 5 x 2) / 4.
  EXPECT_DOUBLE_EQ(activation_memory(with(true, Recompute::kNone)), 45.75 * bshl);
  EXPECT_DOUBLE_EQ(activation_memory(with(true, Recompute::kSelective)), 5.75 * bshl);
  // Full recomputation keeps only the layer inputs, whatever the experts do.
  EXPECT_DOUBLE_EQ(activation_memory(with(true, Recompute::kFull)), 0.5 * bshl);
  EXPECT_DOUBLE_EQ(activation_memory(with(false, Recompute::kFull)), 2 * bshl);
}

TEST(MontaMemory, ActivationsReduceToThePublishedFormulas) {
  // MoNTA Eq. 2 without parallelism: bshl (13 + 21k + 5as/h).
  ActivationInputs in{2, 1024, 512, 8, 3, 2048, 2, 1, false, Recompute::kNone};
  const double bshl = 2.0 * 1024 * 512 * 3;
  EXPECT_DOUBLE_EQ(activation_memory(in), bshl * (13 + 21 * 2 + 5.0 * 8 * 1024 / 512));
  // Dense layer (k = 1) with TP: Korthikanti Eq. 2, sbh (10 + 24/t + 5as/(ht)).
  in.k = 1;
  in.t = 8;
  EXPECT_DOUBLE_EQ(activation_memory(in), bshl * (10 + 24.0 / 8 + 5.0 * 8 * 1024 / (512 * 8)));
  // Korthikanti Eq. 4, TP + SP: sbh/t (34 + 5as/h).
  in.sp = true;
  EXPECT_DOUBLE_EQ(activation_memory(in), bshl / 8 * (34 + 5.0 * 8 * 1024 / 512));
  // A narrower expert FFN stores proportionally less: ffn = 2h gives 5 + 8 per copy.
  in.ffn_hidden = 1024;
  in.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(activation_memory(in), bshl / 8 * (13 + 13));
}

TEST(MontaMemory, TotalIsEq1) {
  const WeightMemory w{3e9, 5e9};
  EXPECT_DOUBLE_EQ(total_memory(w, 2e9), 10e9);
}

TEST(MontaMemory, Errors) {
  auto weights_with = [](auto change) {
    WeightMemoryInputs in = weights_example(1, 2, 4);
    change(in);
    return in;
  };
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.dense_params = -1; })),
                   "WeightMemoryInputs.dense_params", ">= 0");
  EXPECT_ERROR_HAS(weight_memory(weights_with(
                       [](auto& i) { i.moe_params = std::numeric_limits<double>::quiet_NaN(); })),
                   "WeightMemoryInputs.moe_params");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.p = 0; })), "WeightMemoryInputs.p");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.t = 0; })), "WeightMemoryInputs.t");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.e = -2; })), "WeightMemoryInputs.e");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.dense_dp = 0; })),
                   "WeightMemoryInputs.dense_dp");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.expert_dp = 0; })),
                   "WeightMemoryInputs.expert_dp");
  EXPECT_ERROR_HAS(weight_memory(weights_with([](auto& i) { i.zero = 4; })),
                   "WeightMemoryInputs.zero", "0, 1, 2 or 3");
  EXPECT_ERROR_HAS(model_state_bytes_per_param(-1, 1), "WeightMemoryInputs.zero");
  EXPECT_ERROR_HAS(model_state_bytes_per_param(1, 0), "dp", "at least 1");

  auto act_with = [](auto change) {
    ActivationInputs in = act_example(true, Recompute::kNone);
    change(in);
    return in;
  };
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.b = 0; })), "ActivationInputs.b");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.s = 0; })), "ActivationInputs.s");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.h = 0; })), "ActivationInputs.h");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.a = 0; })), "ActivationInputs.a");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.l = 0; })), "ActivationInputs.l");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.ffn_hidden = 0; })),
                   "ActivationInputs.ffn_hidden");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.k = 0; })), "ActivationInputs.k");
  EXPECT_ERROR_HAS(activation_memory(act_with([](auto& i) { i.t = 0; })), "ActivationInputs.t");
  EXPECT_ERROR_HAS(total_memory({1, 1}, -1), "activation_bytes");
}

}  // namespace
}  // namespace moecomm::plan

// Experts: forward formulas and gradients of inputs and weights by finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"
#include "nn/expert.h"
#include "nn/gpt_ffn.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

void check_expert_gradients(core::FfnType kind) {
  std::unique_ptr<Expert> ex = make_expert(kind, 4, 6, 17);
  Tensor x = Tensor::randn({5, 4}, 1);
  const Tensor r = Tensor::randn({5, 4}, 2);
  ExpertCache cache;
  ex->forward(x, cache);
  ex->zero_grad();
  const Tensor dx = ex->backward(r, cache);
  auto loss = [&] {
    ExpertCache c;
    return testing::dot(ex->forward(x, c), r);
  };
  testing::check_gradient("dx", x, dx, loss);
  for (const Param& p : ex->params()) {
    const Tensor g = *p.grad;
    testing::check_gradient(p.name, *p.value, g, loss);
  }
}

TEST(GptFfn, GradientsMatchFiniteDifferences) {
  check_expert_gradients(core::FfnType::kGelu);
}
TEST(MixtralFfn, GradientsMatchFiniteDifferences) {
  check_expert_gradients(core::FfnType::kSwiglu);
}

TEST(MixtralFfn, SwiGluOnAOneByOneExpert) {
  std::unique_ptr<Expert> ex = make_expert(core::FfnType::kSwiglu, 1, 1, 0);
  std::vector<Param> p = ex->params();  // w1, w3, w2
  p[0].value->fill(2.0f);
  p[1].value->fill(3.0f);
  p[2].value->fill(-1.0f);
  ExpertCache c;
  const Tensor y = ex->forward(Tensor({1, 1}, {0.5f}), c);
  const float silu = 1.0f / (1.0f + std::exp(-1.0f));  // SiLU(1) = sigmoid(1)
  EXPECT_NEAR(y[0], -silu * 1.5f, 1e-6f);
}

TEST(GptFfn, GeluAndEmptyBlocks) {
  EXPECT_NEAR(gelu(1.0f), 0.841192f, 1e-5f);
  EXPECT_EQ(gelu(0.0f), 0.0f);
  std::unique_ptr<Expert> ex = make_expert(core::FfnType::kGelu, 3, 4, 1);
  ExpertCache c;
  const Tensor y = ex->forward(Tensor({0, 3}), c);
  EXPECT_EQ(y.rows(), 0);
  ex->zero_grad();
  EXPECT_EQ(ex->backward(Tensor({0, 3}), c).rows(), 0);
  EXPECT_ERROR_HAS(make_expert(core::FfnType::kGelu, 0, 4, 1), "gpt ffn", "positive");
}

// ESP: the shards' partial outputs and input gradients sum to the full expert's, and each
// shard's weight gradients are the full expert's, sliced along the FFN dimension.
void check_shards(core::FfnType kind, int shards) {
  SCOPED_TRACE(std::to_string(shards) + " shards");
  constexpr int kHidden = 4, kFfn = 12;
  auto full = make_expert(kind, kHidden, kFfn, 23);
  const Tensor x = Tensor::randn({6, kHidden}, 3), dy = Tensor::randn({6, kHidden}, 4);
  ExpertCache cache;
  const Tensor y = full->forward(x, cache);
  full->zero_grad();
  const Tensor dx = full->backward(dy, cache);
  Tensor y_sum(y.shape()), dx_sum(dx.shape());
  const int width = kFfn / shards;
  for (int s = 0; s < shards; ++s) {
    auto part = make_expert(kind, kHidden, kFfn, 23, s, shards);
    ExpertCache c;
    y_sum.add(part->forward(x, c));
    part->zero_grad();
    dx_sum.add(part->backward(dy, c));
    for (const Param& p : part->params())
      for (const Param& q : full->params()) {
        if (q.name != p.name) continue;
        // Input projections are [M, F] (columns sliced), the output one [F, M] (rows), b1 [F].
        Tensor want = *q.grad;
        if (p.name == "w2")
          want = want.slice_rows(s * width, width);
        else if (p.name == "b1") {
          want.reshape({1, kFfn});
          want = want.slice_cols(s * width, width);
          want.reshape({width});
        } else if (p.name != "b2")
          want = want.slice_cols(s * width, width);
        EXPECT_LE(max_abs_diff(*p.grad, want), 1e-5f) << p.name << " shard " << s;
      }
    bool has_b2 = false;
    for (const Param& p : part->params()) has_b2 = has_b2 || p.name == "b2";
    if (kind == core::FfnType::kGelu) {
      EXPECT_EQ(has_b2, s == 0) << "the output bias is shard 0's";
    }
  }
  EXPECT_LE(max_abs_diff(y_sum, y), 1e-5f);
  EXPECT_LE(max_abs_diff(dx_sum, dx), 1e-5f);
}

TEST(Experts, ShardsSumToTheFullExpert) {
  for (core::FfnType kind : {core::FfnType::kGelu, core::FfnType::kSwiglu})
    for (int shards : {1, 2, 3, 4}) check_shards(kind, shards);
}

TEST(Experts, BadShardsAreAnError) {
  EXPECT_ERROR_HAS(make_expert(core::FfnType::kGelu, 4, 6, 1, 0, 4), "dividing ffn_hidden 6");
  EXPECT_ERROR_HAS(make_expert(core::FfnType::kGelu, 4, 6, 1, 2, 2), "shard 2 of 2");
}

TEST(Experts, SeedsDependOnlyOnTheGlobalIndex) {
  EXPECT_EQ(expert_seed(5, 3), expert_seed(5, 3));
  EXPECT_NE(expert_seed(5, 3), expert_seed(5, 4));
}

}  // namespace
}  // namespace moecomm::nn

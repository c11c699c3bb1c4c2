// Experts: forward formulas and gradients of inputs and weights by finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "grad_check.h"
#include "nn/expert.h"
#include "nn/gpt_ffn.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

void check_expert_gradients(ExpertKind kind) {
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
  check_expert_gradients(ExpertKind::kGptFfn);
}
TEST(MixtralFfn, GradientsMatchFiniteDifferences) {
  check_expert_gradients(ExpertKind::kMixtralFfn);
}

TEST(MixtralFfn, SwiGluOnAOneByOneExpert) {
  std::unique_ptr<Expert> ex = make_expert(ExpertKind::kMixtralFfn, 1, 1, 0);
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
  std::unique_ptr<Expert> ex = make_expert(ExpertKind::kGptFfn, 3, 4, 1);
  ExpertCache c;
  const Tensor y = ex->forward(Tensor({0, 3}), c);
  EXPECT_EQ(y.rows(), 0);
  ex->zero_grad();
  EXPECT_EQ(ex->backward(Tensor({0, 3}), c).rows(), 0);
  EXPECT_ERROR_HAS(make_expert(ExpertKind::kGptFfn, 0, 4, 1), "gpt ffn", "positive");
}

TEST(Experts, SeedsDependOnlyOnTheGlobalIndex) {
  EXPECT_EQ(expert_seed(5, 3), expert_seed(5, 3));
  EXPECT_NE(expert_seed(5, 3), expert_seed(5, 4));
}

}  // namespace
}  // namespace moecomm::nn

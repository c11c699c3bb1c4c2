#include "nn/gpt_ffn.h"

#include <cmath>

#include "core/error.h"
#include "nn/gemm.h"

namespace moecomm::nn {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

float gelu(float a) {
  return 0.5f * a * (1.0f + std::tanh(kSqrt2OverPi * (a + kCubic * a * a * a)));
}

float gelu_grad(float a) {
  const float th = std::tanh(kSqrt2OverPi * (a + kCubic * a * a * a));
  return 0.5f * (1.0f + th) +
         0.5f * a * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * a * a);
}

GptFfn::GptFfn(int hidden, int ffn_hidden, uint64_t seed) {
  if (hidden <= 0 || ffn_hidden <= 0)
    throw Error("gpt ffn", "hidden and ffn_hidden must be positive");
  w1_ = Tensor::uniform({hidden, ffn_hidden}, seed, 1.0f / std::sqrt(static_cast<float>(hidden)));
  b1_ = Tensor::uniform({ffn_hidden}, seed + 1, 0.1f);
  w2_ = Tensor::uniform({ffn_hidden, hidden}, seed + 2,
                        1.0f / std::sqrt(static_cast<float>(ffn_hidden)));
  b2_ = Tensor::uniform({hidden}, seed + 3, 0.1f);
  dw1_ = Tensor(w1_.shape());
  db1_ = Tensor(b1_.shape());
  dw2_ = Tensor(w2_.shape());
  db2_ = Tensor(b2_.shape());
}

Tensor GptFfn::forward(const Tensor& x, ExpertCache& cache) const {
  Tensor a = matmul(x, w1_);
  add_row_vector(a, b1_);
  Tensor h(a.shape());
  for (int64_t i = 0; i < a.size(); ++i) h[i] = gelu(a[i]);
  Tensor y = matmul(h, w2_);
  add_row_vector(y, b2_);
  cache.saved = {x, std::move(a), std::move(h)};
  return y;
}

Tensor GptFfn::backward(const Tensor& dy, const ExpertCache& cache) {
  const Tensor& x = cache.saved.at(0);
  const Tensor& a = cache.saved.at(1);
  const Tensor& h = cache.saved.at(2);
  gemm(Trans::kYes, Trans::kNo, 1.0f, h, dy, 1.0f, dw2_);  // dW2 += h^T dy
  add_column_sums(dy, db2_);
  Tensor da = matmul(dy, w2_, Trans::kNo, Trans::kYes);  // dh = dy W2^T
  for (int64_t i = 0; i < da.size(); ++i) da[i] *= gelu_grad(a[i]);
  gemm(Trans::kYes, Trans::kNo, 1.0f, x, da, 1.0f, dw1_);  // dW1 += x^T da
  add_column_sums(da, db1_);
  return matmul(da, w1_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn

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

// A shard draws the full expert's weights and keeps its slice, so its weights equal the
// unsharded expert's whatever the shard count.
GptFfn::GptFfn(int hidden, int ffn_hidden, uint64_t seed, FfnShard shard) {
  if (hidden <= 0 || ffn_hidden <= 0)
    throw Error("gpt ffn", "hidden and ffn_hidden must be positive");
  const int width = ffn_hidden / shard.count, first = shard.index * width;
  w1_ = Tensor::uniform({hidden, ffn_hidden}, seed, 1.0f / std::sqrt(static_cast<float>(hidden)))
            .slice_cols(first, width);
  b1_ = Tensor::uniform({1, ffn_hidden}, seed + 1, 0.1f).slice_cols(first, width);
  b1_.reshape({width});
  w2_ = Tensor::uniform({ffn_hidden, hidden}, seed + 2,
                        1.0f / std::sqrt(static_cast<float>(ffn_hidden)))
            .slice_rows(first, width);
  b2_ = Tensor::uniform({hidden}, seed + 3, 0.1f);
  output_bias_ = shard.index == 0;
  if (!output_bias_) b2_.fill(0.0f);
  dw1_ = Tensor(w1_.shape());
  db1_ = Tensor(b1_.shape());
  dw2_ = Tensor(w2_.shape());
  db2_ = Tensor(b2_.shape());
}

std::vector<Param> GptFfn::params() {
  std::vector<Param> p = {{"w1", &w1_, &dw1_}, {"b1", &b1_, &db1_}, {"w2", &w2_, &dw2_}};
  if (output_bias_) p.push_back({"b2", &b2_, &db2_});
  return p;
}

Tensor GptFfn::forward(const Tensor& x, ExpertCache& cache) const {
  Tensor a = matmul(x, w1_);
  add_row_vector(a, b1_);
  Tensor h(a.shape());
  for (int64_t i = 0; i < a.size(); ++i) h[i] = gelu(a[i]);
  Tensor y = matmul(h, w2_);
  if (output_bias_) add_row_vector(y, b2_);
  cache.saved = {x, std::move(a), std::move(h)};
  return y;
}

Tensor GptFfn::backward(const Tensor& dy, const ExpertCache& cache) {
  const Tensor& x = cache.saved.at(0);
  const Tensor& a = cache.saved.at(1);
  const Tensor& h = cache.saved.at(2);
  gemm(Trans::kYes, Trans::kNo, 1.0f, h, dy, 1.0f, dw2_);  // dW2 += h^T dy
  if (output_bias_) add_column_sums(dy, db2_);
  Tensor da = matmul(dy, w2_, Trans::kNo, Trans::kYes);  // dh = dy W2^T
  for (int64_t i = 0; i < da.size(); ++i) da[i] *= gelu_grad(a[i]);
  gemm(Trans::kYes, Trans::kNo, 1.0f, x, da, 1.0f, dw1_);  // dW1 += x^T da
  add_column_sums(da, db1_);
  return matmul(da, w1_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn

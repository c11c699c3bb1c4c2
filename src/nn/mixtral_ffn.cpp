#include "nn/mixtral_ffn.h"

#include <cmath>

#include "core/error.h"
#include "nn/gemm.h"

namespace moecomm::nn {
namespace {

float sigmoid(float a) {
  return 1.0f / (1.0f + std::exp(-a));
}

}  // namespace

MixtralFfn::MixtralFfn(int hidden, int ffn_hidden, uint64_t seed, FfnShard shard) {
  if (hidden <= 0 || ffn_hidden <= 0)
    throw Error("mixtral ffn", "hidden and ffn_hidden must be positive");
  const int width = ffn_hidden / shard.count, first = shard.index * width;
  const float in_bound = 1.0f / std::sqrt(static_cast<float>(hidden));
  w1_ = Tensor::uniform({hidden, ffn_hidden}, seed, in_bound).slice_cols(first, width);
  w3_ = Tensor::uniform({hidden, ffn_hidden}, seed + 1, in_bound).slice_cols(first, width);
  w2_ = Tensor::uniform({ffn_hidden, hidden}, seed + 2,
                        1.0f / std::sqrt(static_cast<float>(ffn_hidden)))
            .slice_rows(first, width);
  dw1_ = Tensor(w1_.shape());
  dw3_ = Tensor(w3_.shape());
  dw2_ = Tensor(w2_.shape());
}

Tensor MixtralFfn::forward(const Tensor& x, ExpertCache& cache) const {
  Tensor a1 = matmul(x, w1_);
  Tensor a3 = matmul(x, w3_);
  Tensor h(a1.shape());
  for (int64_t i = 0; i < h.size(); ++i) h[i] = a1[i] * sigmoid(a1[i]) * a3[i];
  Tensor y = matmul(h, w2_);
  cache.saved = {x, std::move(a1), std::move(a3), std::move(h)};
  return y;
}

Tensor MixtralFfn::backward(const Tensor& dy, const ExpertCache& cache) {
  const Tensor& x = cache.saved.at(0);
  const Tensor& a1 = cache.saved.at(1);
  const Tensor& a3 = cache.saved.at(2);
  const Tensor& h = cache.saved.at(3);
  gemm(Trans::kYes, Trans::kNo, 1.0f, h, dy, 1.0f, dw2_);
  const Tensor dh = matmul(dy, w2_, Trans::kNo, Trans::kYes);
  Tensor da1(dh.shape()), da3(dh.shape());
  for (int64_t i = 0; i < dh.size(); ++i) {
    const float s = sigmoid(a1[i]);
    da3[i] = dh[i] * a1[i] * s;                                // d/da3 = SiLU(a1)
    da1[i] = dh[i] * a3[i] * s * (1.0f + a1[i] * (1.0f - s));  // SiLU'(a1)
  }
  gemm(Trans::kYes, Trans::kNo, 1.0f, x, da1, 1.0f, dw1_);
  gemm(Trans::kYes, Trans::kNo, 1.0f, x, da3, 1.0f, dw3_);
  Tensor dx = matmul(da1, w1_, Trans::kNo, Trans::kYes);
  gemm(Trans::kNo, Trans::kYes, 1.0f, da3, w3_, 1.0f, dx);
  return dx;
}

}  // namespace moecomm::nn

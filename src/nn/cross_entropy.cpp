#include "nn/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "nn/gemm.h"

namespace moecomm::nn {

CrossEntropyResult cross_entropy(const Tensor& logits, const std::vector<int>& targets) {
  const int64_t n = logits.rows(), v = logits.cols();
  if (static_cast<int64_t>(targets.size()) != n)
    throw Error("cross entropy", std::to_string(targets.size()) + " targets for " +
                                     std::to_string(n) + " rows of logits");
  CrossEntropyResult out;
  out.dlogits = Tensor(logits.shape());
  for (int t : targets) {
    if (t >= v)
      throw Error("cross entropy",
                  "target " + std::to_string(t) + " outside [0, " + std::to_string(v) + ")");
    if (t >= 0) ++out.counted;
  }
  if (out.counted == 0) return out;
  const double inv = 1.0 / out.counted;
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int t = targets[static_cast<size_t>(r)];
    if (t < 0) continue;
    const float* z = logits.row(r);
    float* d = out.dlogits.row(r);
    const float mx = *std::max_element(z, z + v);
    double sum = 0.0;
    for (int64_t c = 0; c < v; ++c) sum += std::exp(static_cast<double>(z[c] - mx));
    total += mx + std::log(sum) - z[t];
    for (int64_t c = 0; c < v; ++c)
      d[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - mx)) / sum * inv);
    d[t] -= static_cast<float>(inv);
  }
  out.loss = static_cast<float>(total * inv);
  return out;
}

LmHead::LmHead(int hidden, int vocab, uint64_t seed, float init_std) {
  if (hidden <= 0 || vocab <= 0) throw Error("lm head", "hidden and vocab must be positive");
  w_ = Tensor::randn({hidden, vocab}, seed, init_std);
  b_ = Tensor({vocab});
  dw_ = Tensor(w_.shape());
  db_ = Tensor(b_.shape());
}

float LmHead::forward(const Tensor& h, const std::vector<int>& targets) {
  logits_ = matmul(h, w_);
  for (int64_t r = 0; r < logits_.rows(); ++r)
    for (int64_t c = 0; c < logits_.cols(); ++c) logits_.at(r, c) += b_[c];
  CrossEntropyResult ce = cross_entropy(logits_, targets);
  h_ = h;
  dlogits_ = std::move(ce.dlogits);
  has_forward_ = true;
  return ce.loss;
}

Tensor LmHead::backward() {
  if (!has_forward_) throw Error("lm head", "backward needs a forward first");
  gemm(Trans::kYes, Trans::kNo, 1.0f, h_, dlogits_, 1.0f, dw_);  // dW += h^T dlogits
  for (int64_t r = 0; r < dlogits_.rows(); ++r)
    for (int64_t c = 0; c < dlogits_.cols(); ++c) db_[c] += dlogits_.at(r, c);
  return matmul(dlogits_, w_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn

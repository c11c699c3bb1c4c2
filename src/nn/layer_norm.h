#pragma once
// Layer normalisation over the last dimension of x [T, M]:
//   y = gamma * (x - mean) / sqrt(var + eps) + beta   (biased variance, per row)
// gamma = 1, beta = 0 at init. Backward returns dx and accumulates (+=) dgamma, dbeta.
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

class LayerNorm {
 public:
  explicit LayerNorm(int hidden, float eps = 1e-5f);

  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& dy);  // of the last forward

  std::vector<Param> params() { return {{"gamma", &gamma_, &dgamma_}, {"beta", &beta_, &dbeta_}}; }

 private:
  float eps_;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor xhat_;              // saved: normalised x
  std::vector<float> rstd_;  // saved: 1 / sqrt(var + eps) per row
};

}  // namespace moecomm::nn

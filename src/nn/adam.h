#pragma once
// Adam (Kingma & Ba) over a list of parameters, with decoupled weight decay (AdamW) when
// weight_decay > 0. Step t (from 1), per element:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * p)
// The Params (and their tensors) must outlive the optimiser.
#include <cstdint>
#include <vector>

#include "nn/param.h"

namespace moecomm::nn {

struct AdamConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

class Adam {
 public:
  Adam(std::vector<Param*> params, AdamConfig config = {});

  void step();       // one update from the current gradients
  void zero_grad();  // gradients to 0
  int64_t steps() const { return t_; }
  AdamConfig& config() { return config_; }  // e.g. to change lr between steps

 private:
  std::vector<Param*> params_;
  AdamConfig config_;
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

void zero_grad(const std::vector<Param*>& params);
// grad *= factor (e.g. 1 / ranks after a sum-AllReduce).
void scale_grad(const std::vector<Param*>& params, float factor);

}  // namespace moecomm::nn

#pragma once
// Mixtral feed-forward expert (SwiGLU, Mixtral / LLaMA): y = (SiLU(x W1) * (x W3)) W2,
// SiLU(a) = a sigmoid(a); no biases. W1, W3 [M, H], W2 [H, M].
#include <cstdint>

#include "nn/expert.h"

namespace moecomm::nn {

class MixtralFfn : public Expert {
 public:
  MixtralFfn(int hidden, int ffn_hidden, uint64_t seed, FfnShard shard = {});
  Tensor forward(const Tensor& x, ExpertCache& cache) const override;
  Tensor backward(const Tensor& dy, const ExpertCache& cache) override;
  std::vector<Param> params() override {
    return {{"w1", &w1_, &dw1_}, {"w3", &w3_, &dw3_}, {"w2", &w2_, &dw2_}};
  }

 private:
  Tensor w1_, w3_, w2_;
  Tensor dw1_, dw3_, dw2_;
};

}  // namespace moecomm::nn

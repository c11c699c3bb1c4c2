#pragma once
// GPT feed-forward expert (GPT-2/3): y = GELU(x W1 + b1) W2 + b2, with the tanh GELU
//   GELU(a) = a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))).
// W1 [M, H], b1 [H], W2 [H, M], b2 [M].
#include <cstdint>

#include "nn/expert.h"

namespace moecomm::nn {

class GptFfn : public Expert {
 public:
  GptFfn(int hidden, int ffn_hidden, uint64_t seed, FfnShard shard = {});
  Tensor forward(const Tensor& x, ExpertCache& cache) const override;
  Tensor backward(const Tensor& dy, const ExpertCache& cache) override;
  std::vector<Param> params() override;

 private:
  Tensor w1_, b1_, w2_, b2_;
  Tensor dw1_, db1_, dw2_, db2_;
  bool output_bias_ = true;  // shard 0 only: the shards' outputs are summed
};

float gelu(float a);
float gelu_grad(float a);

}  // namespace moecomm::nn

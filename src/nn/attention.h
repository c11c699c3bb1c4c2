#pragma once
// Causal multi-head self-attention on B sequences of length S, x [B * S, M] (sequence-major):
//   [Q K V] = x Wqkv + bqkv                       Wqkv [M, 3M], bqkv [3M]
//   per sequence b and head h (columns h dh .. (h + 1) dh, dh = M / heads):
//     P = softmax(Q K^T / sqrt(dh)) with P[i][j] = 0 for j > i (causal)
//     O = P V
//   y = O Wo + bo                                 Wo [M, M], bo [M]
// GEMMs through nn::gemm. Backward returns dx and accumulates (+=) the weight gradients.
#include <cstdint>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

class CausalSelfAttention {
 public:
  // Weights U(-1/sqrt(M), 1/sqrt(M)) from seed (Wqkv) and seed + 1 (Wo); biases 0.
  CausalSelfAttention(int hidden, int heads, uint64_t seed);

  Tensor forward(const Tensor& x, int seq_len);  // seq_len must divide x.rows()
  Tensor backward(const Tensor& dy);             // of the last forward

  std::vector<Param> params() {
    return {{"wqkv", &wqkv_, &dwqkv_},
            {"bqkv", &bqkv_, &dbqkv_},
            {"wo", &wo_, &dwo_},
            {"bo", &bo_, &dbo_}};
  }
  int heads() const { return heads_; }

 private:
  // Q, K or V (which = 0, 1, 2) of sequence b, head h as an [S, dh] tensor, and back.
  Tensor head_block(const Tensor& qkv, int which, int64_t b, int h) const;
  void add_head_block(Tensor& qkv, int which, int64_t b, int h, const Tensor& block) const;

  int hidden_, heads_, head_dim_;
  Tensor wqkv_, bqkv_, wo_, bo_;
  Tensor dwqkv_, dbqkv_, dwo_, dbo_;
  // Saved by forward.
  int seq_len_ = 0;
  Tensor x_, qkv_, o_;
  std::vector<Tensor> probs_;  // [B * heads] of [S, S]
};

}  // namespace moecomm::nn

#pragma once
// Causal multi-head self-attention on B sequences of length S, x [B * S, M] (sequence-major):
//   [Q K V] = x Wqkv + bqkv                       Wqkv [M, 3M], bqkv [3M]
//   per sequence b and head h (columns h dh .. (h + 1) dh, dh = M / heads):
//     P = softmax(Q K^T / sqrt(dh)) with P[i][j] = 0 for j > i (causal)
//     O = P V
//   y = O Wo + bo                                 Wo [M, M], bo [M]
// GEMMs through nn::gemm. Backward returns dx and accumulates (+=) the weight gradients.
//
// Tensor parallelism (Megatron-LM): shard t of T holds heads [t H/T, (t + 1) H/T): those
// heads' columns of Wqkv and bqkv (column parallel) and rows of Wo (row parallel); bo lives
// on shard 0. Forward returns a partial y and backward a partial dx, each summing over the
// shards to the unsharded layer's (the caller AllReduces them: Megatron's g and f); weight
// gradients are the unsharded layer's, sliced.
#include <cstdint>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

class CausalSelfAttention {
 public:
  // Weights U(-1/sqrt(M), 1/sqrt(M)) from seed (Wqkv) and seed + 1 (Wo); biases 0. A shard
  // draws the full weights and keeps its slice. Throws Error unless shards divide heads.
  CausalSelfAttention(int hidden, int heads, uint64_t seed, int shard = 0, int shards = 1);

  Tensor forward(const Tensor& x, int seq_len);  // seq_len must divide x.rows()
  Tensor backward(const Tensor& dy);             // of the last forward

  std::vector<Param> params();
  int heads() const { return heads_; }  // this shard's

 private:
  // Q, K or V (which = 0, 1, 2) of sequence b, head h as an [S, dh] tensor, and back.
  Tensor head_block(const Tensor& qkv, int which, int64_t b, int h) const;
  void add_head_block(Tensor& qkv, int which, int64_t b, int h, const Tensor& block) const;

  int hidden_, heads_, head_dim_;
  int inner_;                // heads_ * head_dim_: this shard's width of Q, K, V and O
  bool output_bias_ = true;  // shard 0 only: the shards' outputs are summed
  Tensor wqkv_, bqkv_, wo_, bo_;
  Tensor dwqkv_, dbqkv_, dwo_, dbo_;
  // Saved by forward.
  int seq_len_ = 0;
  Tensor x_, qkv_, o_;
  std::vector<Tensor> probs_;  // [B * heads] of [S, S]
};

}  // namespace moecomm::nn

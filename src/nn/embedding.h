#pragma once
// Token and learned positional embedding: for a batch of B sequences of length S given as
// token ids [B * S] (sequence-major), x[b S + s] = tok[ids[b S + s]] + pos[s].
// tok [V, M], pos [max_seq, M]. Backward accumulates (+=) into both tables.
#include <cstdint>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

class Embedding {
 public:
  // Tables drawn from N(0, init_std^2) with seeds seed (tok) and seed + 1 (pos).
  Embedding(int vocab, int max_seq, int hidden, uint64_t seed, float init_std = 0.1f);

  // ids: [B * S], each in [0, vocab); seq_len S in [1, max_seq] must divide ids.size().
  Tensor forward(const std::vector<int>& ids, int seq_len);
  void backward(const Tensor& dy);  // dy [B * S, M] of the last forward

  std::vector<Param> params() { return {{"tok", &tok_, &dtok_}, {"pos", &pos_, &dpos_}}; }
  int vocab() const { return static_cast<int>(tok_.rows()); }
  int max_seq() const { return static_cast<int>(pos_.rows()); }
  int hidden() const { return static_cast<int>(tok_.cols()); }

 private:
  Tensor tok_, pos_, dtok_, dpos_;
  std::vector<int> ids_;  // saved by forward
  int seq_len_ = 0;
};

}  // namespace moecomm::nn

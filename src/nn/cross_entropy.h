#pragma once
// Cross-entropy over the vocabulary, and the (untied) LM head that produces the logits:
//   logits = h W + b                     W [M, V], b [V]
//   loss = mean over counted tokens t of (logsumexp(logits_t) - logits_t[target_t])
// A target < 0 is ignored (not counted). The mean is over this process's tokens: under data
// parallelism the global loss is the mean over ranks (equal token counts), so the caller
// averages gradients across ranks.
#include <cstdint>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

struct CrossEntropyResult {
  float loss = 0.0f;  // mean over counted tokens (0 if none)
  Tensor dlogits;     // dloss/dlogits [T, V]
  int counted = 0;
};

// logits [T, V], targets [T] in [0, V) or < 0 (ignored).
CrossEntropyResult cross_entropy(const Tensor& logits, const std::vector<int>& targets);

class LmHead {
 public:
  // W ~ N(0, init_std^2) from seed; b = 0.
  LmHead(int hidden, int vocab, uint64_t seed, float init_std = 0.02f);

  // h [T, M] (the final hidden states) -> mean cross-entropy; keeps what backward needs.
  float forward(const Tensor& h, const std::vector<int>& targets);
  Tensor backward();  // dloss/dh of the last forward; accumulates (+=) dW, db

  const Tensor& logits() const { return logits_; }
  std::vector<Param> params() { return {{"w", &w_, &dw_}, {"b", &b_, &db_}}; }

 private:
  Tensor w_, b_, dw_, db_;
  Tensor h_, logits_, dlogits_;  // saved by forward
  bool has_forward_ = false;
};

}  // namespace moecomm::nn

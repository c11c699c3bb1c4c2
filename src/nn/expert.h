#pragma once
// The Expert module (FSMoE Sec. 3.1): a feed-forward network applied to a contiguous block
// of rows [n, M] (the rows routed to this expert). Forward saves its activations in an
// ExpertCache the caller keeps, so an expert can run several chunks (FSMoE's pipeline)
// before their backwards; backward accumulates (+=) weight gradients.
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

struct ExpertCache {
  std::vector<Tensor> saved;
};

class Expert {
 public:
  virtual ~Expert() = default;
  virtual Tensor forward(const Tensor& x, ExpertCache& cache) const = 0;    // [n, M] -> [n, M]
  virtual Tensor backward(const Tensor& dy, const ExpertCache& cache) = 0;  // returns dx
  // Names are local ("w1", "b1", ...); the layer prefixes "expert<e>.".
  virtual std::vector<Param> params() = 0;
  void zero_grad();
};

enum class ExpertKind { kGptFfn, kMixtralFfn };

// One expert with deterministic weights from seed (see expert_seed for the layer's).
std::unique_ptr<Expert> make_expert(ExpertKind kind, int hidden, int ffn_hidden, uint64_t seed);

// The seed of global expert e: the same on every rank, whichever rank holds the expert.
uint64_t expert_seed(uint64_t base, int global_expert);

}  // namespace moecomm::nn

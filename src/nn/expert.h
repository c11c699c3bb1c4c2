#pragma once
// The Expert module (FSMoE Sec. 3.1): a feed-forward network applied to a contiguous block
// of rows [n, M] (the rows routed to this expert). Forward saves its activations in an
// ExpertCache the caller keeps, so an expert can run several chunks (FSMoE's pipeline)
// before their backwards; backward accumulates (+=) weight gradients.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/model_config.h"
#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

// Every saved tensor is row-aligned with the input rows ([n, *]), so a pipelined layer can
// keep one cache per expert and hand a backward chunk the rows it needs (moe_layer.cpp).
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

// Which slice of the FFN dimension an expert holds (make_expert): shard `index` of `count`.
struct FfnShard {
  int index = 0;
  int count = 1;
};

// One expert, GPT's GELU FFN or Mixtral's SwiGLU FFN (core::FfnType), with deterministic
// weights from seed (see expert_seed for the layer's).
// With shards > 1, shard `shard` of it (expert sharding parallelism, FSMoE's ESP, Megatron's
// expert tensor parallelism): the full expert's weights sliced along the FFN dimension,
// columns [shard F / shards, (shard + 1) F / shards) of the input projections and those rows
// of the output projection; the output bias lives on shard 0 only. Forward returns a partial
// output and backward a partial input gradient; each sums over the shards to the full
// expert's, and each shard's weight gradients are the full expert's, sliced.
std::unique_ptr<Expert> make_expert(core::FfnType ffn_type, int hidden, int ffn_hidden,
                                    uint64_t seed, int shard = 0, int shards = 1);

// The seed of global expert e: the same on every rank, whichever rank holds the expert.
uint64_t expert_seed(uint64_t base, int global_expert);

}  // namespace moecomm::nn

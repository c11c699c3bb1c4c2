#pragma once
// The AllReduce of Megatron-LM's tensor parallelism, as nn sees it: after a row-parallel
// layer the shards' partial outputs are summed (the "g" operator), and before a
// column-parallel one the partial input gradients are (the "f" operator's backward). The
// runtime implements it over the TP group's communicator.
#include "nn/tensor.h"

namespace moecomm::nn {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual void all_reduce_sum(Tensor& t) = 0;  // in place, every member the same call
};

}  // namespace moecomm::nn

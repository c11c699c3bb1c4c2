#pragma once
// A named trainable parameter and its gradient, as listed by gates, experts and the layer
// (for finite-difference checks, optimisers and the runtime's gradient AllReduce).
#include <string>

#include "nn/tensor.h"

namespace moecomm::nn {

struct Param {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;  // same shape; backward accumulates (+=) into it
};

}  // namespace moecomm::nn

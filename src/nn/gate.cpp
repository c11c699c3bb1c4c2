#include "nn/gate.h"

#include "core/error.h"

namespace moecomm::nn {

void Gate::zero_grad() {
  for (Param& p : params()) p.grad->fill(0.0f);
}

void check_gate_shape(int hidden, int experts, int k, const char* where) {
  if (hidden <= 0 || experts <= 0) throw Error(where, "hidden and experts must be positive");
  if (k <= 0 || k > experts) throw Error(where, "k must be in [1, experts]");
}

}  // namespace moecomm::nn

#pragma once
// The Gate module (FSMoE Sec. 3.1): routes tokens x [T, M] to experts. Its output is a list
// of slots (token, expert, combine weight): the Order module lays the slots out per expert,
// and the I-Order module sums expert outputs back per token weighted by the slot weights:
//   y_t = sum over slots s with token t of weight_s * Expert_{expert_s}(x_t).
// Token choice (GShard, sigmoid, X-MoE): k slots per token, slot s = t * k + j for the
// token's j-th choice (j = 0 is its best). Expert choice: C slots per expert, slot
// s = e * C + c for the expert's c-th pick (c = 0 is its best).
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

struct GateOutput {
  int tokens = 0;
  int experts = 0;
  bool expert_choice = false;
  int per_group = 0;          // k (slots per token) or, for expert choice, C (slots per expert)
  std::vector<int> token;     // per slot
  std::vector<int> expert;    // per slot
  std::vector<float> weight;  // per slot: combine weight
  float aux_loss = 0.0f;      // load-balancing auxiliary loss (0 where the gate has none)

  int slots() const { return static_cast<int>(token.size()); }
};

class Gate {
 public:
  virtual ~Gate() = default;
  // Routes x [T, M]; keeps what backward needs (one forward, then its backward).
  virtual GateOutput forward(const Tensor& x) = 0;
  // grad_weight: dL/d weight per slot; grad_aux: dL/d aux_loss (the aux coefficient).
  // Returns dL/dx [T, M] through the gate; accumulates the gate's parameter gradients.
  virtual Tensor backward(const std::vector<float>& grad_weight, float grad_aux) = 0;
  virtual std::vector<Param> params() = 0;
  void zero_grad();
};

// Throws moecomm::Error (where: the gate's name) unless hidden, experts > 0, 1 <= k <= experts.
void check_gate_shape(int hidden, int experts, int k, const char* where);

}  // namespace moecomm::nn

#pragma once
// Expert-choice gate (Zhou et al. 2022, "Mixture-of-Experts with Expert Choice Routing",
// Sec. 3.1): each expert picks its top-C tokens.
//   S = softmax(x Wg)                  [T, E], per token over the experts
//   I[e], G[e] = top-C of S[:, e]      C = min(T, ceil(c T / E)), c = capacity factor (the
//                                      average number of experts per token)
//   slot s = e * C + j: token I[e][j], weight S[I[e][j], e]
// Balanced by construction: there is no auxiliary loss (aux = 0). A token may be picked by
// no expert (its output is then 0) or by several.
#include <cstdint>

#include "nn/gate.h"

namespace moecomm::nn {

struct ExpertChoiceGateConfig {
  int hidden = 0;
  int experts = 0;
  float capacity_factor = 1.0f;  // c
  uint64_t seed = 0;
};

class ExpertChoiceGate : public Gate {
 public:
  explicit ExpertChoiceGate(const ExpertChoiceGateConfig& config);
  GateOutput forward(const Tensor& x) override;
  Tensor backward(const std::vector<float>& grad_weight, float grad_aux) override;
  std::vector<Param> params() override { return {{"gate.wg", &wg_, &dwg_}}; }
  // C for T tokens.
  int capacity(int tokens) const;

 private:
  ExpertChoiceGateConfig config_;
  Tensor wg_, dwg_;
  Tensor x_, p_;  // saved by forward
  GateOutput last_;
};

}  // namespace moecomm::nn

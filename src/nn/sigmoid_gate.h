#pragma once
// Sigmoid gate (BASE Layers / StableMoE style, StableMoE Sec. 2.1 eqs. 1-3):
//   h = x Wg                               Wg [M, E]
//   choice = top-k of h                    (StableMoE / BASE: k = 1); node-limited
//                                          (router_groups): among the experts of the best
//                                          groups by sigmoid(h) (gate_math.h)
//   weight_j = sigmoid(h[e_j])             the token's output is sigma(s) * FFN(x)
//   aux = sum_e ((|A_e| - n) / n) * sum_{t in A_e} sigmoid(h[t, e])      (StableMoE eq. 3)
//     A_e = slots routed to expert e, n = T k / E the balanced count; |A_e| is a count (no
//     gradient), so d aux / d h[t, e] = ((|A_e| - n) / n) sigma'(h[t, e]) for t in A_e.
#include <cstdint>

#include "nn/gate.h"

namespace moecomm::nn {

struct SigmoidGateConfig {
  int hidden = 0;
  int experts = 0;
  int k = 1;
  uint64_t seed = 0;
  // Node-limited routing (group_limited_topk_rows): experts in router_groups groups, each
  // token choosing among its best router_group_top_k (0: every group).
  int router_groups = 1;
  int router_group_top_k = 0;
};

class SigmoidGate : public Gate {
 public:
  explicit SigmoidGate(const SigmoidGateConfig& config);
  GateOutput forward(const Tensor& x) override;
  Tensor backward(const std::vector<float>& grad_weight, float grad_aux) override;
  // The aux loss regroups: count_e = |A_e|, value_e = sum_{t in A_e} sigmoid(h[t, e]).
  bool groups_aux() const override { return true; }
  void add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const override;
  float aux_of(const AuxStats& stats) const override;
  std::vector<Param> params() override { return {{"gate.wg", &wg_, &dwg_}}; }

 private:
  // (|A_e| - n) / n per expert, from the current choices.
  std::vector<float> imbalance() const;
  // The same, per group of the regrouping (one vector per group).
  std::vector<std::vector<float>> imbalance(const AuxGroups& groups) const;

  SigmoidGateConfig config_;
  Tensor wg_, dwg_;
  Tensor x_, h_;  // saved by forward
  std::vector<int> choice_;
};

}  // namespace moecomm::nn

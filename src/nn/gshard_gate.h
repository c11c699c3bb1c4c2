#pragma once
// GShard noisy top-k softmax gate (GShard Sec. 2.2, Algorithm 1; noise as in Tutel):
//   h = x Wg                          Wg [M, E]
//   p = softmax(h)                    per token over the E experts
//   choice = top-k of (h + noise)     noise = noise_std * N(0,1) / E from a seeded RNG; it
//                                     only perturbs the selection, so p (and the gradient)
//                                     is of the clean logits. noise_std = 0 turns it off.
//                                     Node-limited (router_groups): among the experts of the
//                                     best groups by softmax(h + noise) (gate_math.h).
//   weight_j = p[e_j] / sum_i p[e_i]  (k > 1 and normalize, GShard top-2), else p[e_j]
//   aux = E * sum_e f_e m_e           (gate_math.h)
#include <cstdint>
#include <random>

#include "nn/gate.h"

namespace moecomm::nn {

struct GShardGateConfig {
  int hidden = 0;
  int experts = 0;
  int k = 2;
  bool normalize = true;  // renormalise the top-k weights (only when k > 1)
  float noise_std = 0.0f;
  uint64_t seed = 0;  // for Wg's initialisation and the noise stream
  // Node-limited routing (group_limited_topk_rows): experts in router_groups groups, each
  // token choosing among its best router_group_top_k (0: every group).
  int router_groups = 1;
  int router_group_top_k = 0;
};

class GShardGate : public Gate {
 public:
  explicit GShardGate(const GShardGateConfig& config);
  GateOutput forward(const Tensor& x) override;
  Tensor backward(const std::vector<float>& grad_weight, float grad_aux) override;
  bool groups_aux() const override { return true; }
  void add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const override;
  float aux_of(const AuxStats& stats) const override;
  std::vector<Param> params() override { return {{"gate.wg", &wg_, &dwg_}}; }

 private:
  bool normalized() const { return config_.normalize && config_.k > 1; }

  GShardGateConfig config_;
  Tensor wg_, dwg_;
  std::mt19937_64 noise_rng_;
  Tensor x_, p_;  // saved by forward
  std::vector<int> choice_;
};

}  // namespace moecomm::nn

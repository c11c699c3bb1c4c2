#pragma once
// X-MoE gate (Chi et al. 2022, "On the Representation Collapse of Sparse MoE", Sec. 3):
// routing scores are cosine similarities in a low-dimensional space.
//   z = x Wp                              Wp [M, d], d << M (low-rank projection)
//   s[t, e] = <z_t / |z_t|, v_e / |v_e|> / tau     v = expert embeddings [E, d] (L2 normalised)
//   p = softmax(s); choice = top-k of s (node-limited: among the experts of the best
//   groups by p, gate_math.h); weights and aux loss as the GShard gate
//   (normalised top-k weights when k > 1; aux = E * sum_e f_e m_e).
// tau is a fixed temperature here (the paper learns it; a fixed value keeps routing
// identical on every rank).
#include <cstdint>

#include "nn/gate.h"

namespace moecomm::nn {

struct XMoEGateConfig {
  int hidden = 0;
  int experts = 0;
  int k = 1;
  int dim = 8;  // d
  float temperature = 0.07f;
  bool normalize = true;
  uint64_t seed = 0;
  // Node-limited routing (group_limited_topk_rows): experts in router_groups groups, each
  // token choosing among its best router_group_top_k (0: every group).
  int router_groups = 1;
  int router_group_top_k = 0;
};

class XMoEGate : public Gate {
 public:
  explicit XMoEGate(const XMoEGateConfig& config);
  GateOutput forward(const Tensor& x) override;
  Tensor backward(const std::vector<float>& grad_weight, float grad_aux) override;
  bool groups_aux() const override { return true; }
  void add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const override;
  float aux_of(const AuxStats& stats) const override;
  std::vector<Param> params() override {
    return {{"gate.wp", &wp_, &dwp_}, {"gate.embed", &embed_, &dembed_}};
  }

 private:
  bool normalized() const { return config_.normalize && config_.k > 1; }

  XMoEGateConfig config_;
  Tensor wp_, dwp_, embed_, dembed_;
  // Saved by forward: input, unit rows of z and of the embeddings, their norms, p.
  Tensor x_, zhat_, ehat_, p_;
  std::vector<float> znorm_, enorm_;
  std::vector<int> choice_;
};

}  // namespace moecomm::nn

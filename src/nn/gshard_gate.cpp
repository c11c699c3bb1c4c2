#include "nn/gshard_gate.h"

#include <cmath>

#include "core/error.h"
#include "core/model_config.h"
#include "nn/gate_math.h"
#include "nn/gemm.h"

namespace moecomm::nn {

GShardGate::GShardGate(const GShardGateConfig& config)
    : config_(config), noise_rng_(config.seed ^ 0x9e3779b97f4a7c15ull) {
  check_gate_shape(config.hidden, config.experts, config.k, "gshard gate");
  check_gate_groups(config.experts, config.k, config.router_groups, config.router_group_top_k,
                    "gshard gate");
  const float bound = 1.0f / std::sqrt(static_cast<float>(config.hidden));
  wg_ = Tensor::uniform({config.hidden, config.experts}, config.seed, bound);
  dwg_ = Tensor(wg_.shape());
}

GateOutput GShardGate::forward(const Tensor& x) {
  x_ = x;
  Tensor h = matmul(x, wg_);
  p_ = softmax_rows(h);
  if (config_.noise_std > 0.0f) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    const float scale = config_.noise_std / static_cast<float>(config_.experts);
    for (int64_t i = 0; i < h.size(); ++i) h[i] += scale * n01(noise_rng_);
  }
  const bool noisy = config_.noise_std > 0.0f;
  choice_ = core::limits_groups(config_.router_groups, config_.router_group_top_k)
                ? group_limited_topk_rows(h, noisy ? softmax_rows(h) : p_, config_.k,
                                          config_.router_groups, config_.router_group_top_k)
                : topk_rows(h, config_.k);
  return softmax_topk_output(p_, choice_, config_.experts, config_.k, normalized());
}

Tensor GShardGate::backward(const std::vector<float>& grad_weight, float grad_aux) {
  const Tensor dh = softmax_topk_backward(p_, choice_, config_.k, normalized(), grad_weight,
                                          grad_aux, take_aux_groups());
  gemm(Trans::kYes, Trans::kNo, 1.0f, x_, dh, 1.0f, dwg_);  // dWg += x^T dh
  return matmul(dh, wg_, Trans::kNo, Trans::kYes);          // dx = dh Wg^T
}

void GShardGate::add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const {
  add_load_balance_stats(p_, choice_, config_.k, group, stats);
}

float GShardGate::aux_of(const AuxStats& stats) const {
  return load_balance_of(stats);
}

}  // namespace moecomm::nn

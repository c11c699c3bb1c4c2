#include "nn/sigmoid_gate.h"

#include <cmath>

#include "core/model_config.h"

#include "nn/gate_math.h"
#include "nn/gemm.h"

namespace moecomm::nn {
namespace {

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

}  // namespace

SigmoidGate::SigmoidGate(const SigmoidGateConfig& config) : config_(config) {
  check_gate_shape(config.hidden, config.experts, config.k, "sigmoid gate");
  check_gate_groups(config.experts, config.k, config.router_groups, config.router_group_top_k,
                    "sigmoid gate");
  const float bound = 1.0f / std::sqrt(static_cast<float>(config.hidden));
  wg_ = Tensor::uniform({config.hidden, config.experts}, config.seed, bound);
  dwg_ = Tensor(wg_.shape());
}

std::vector<float> SigmoidGate::imbalance() const {
  std::vector<float> a(static_cast<size_t>(config_.experts), 0.0f);
  for (int e : choice_) a[static_cast<size_t>(e)] += 1.0f;
  const float n = static_cast<float>(h_.rows() * config_.k) / static_cast<float>(config_.experts);
  for (float& v : a) v = (v - n) / n;
  return a;
}

std::vector<std::vector<float>> SigmoidGate::imbalance(const AuxGroups& groups) const {
  std::vector<std::vector<float>> out;
  for (const AuxStats& s : groups.stats) {
    const double n = s.tokens * config_.k / config_.experts;
    std::vector<float>& a = out.emplace_back(s.count.size(), 0.0f);
    if (n > 0)
      for (size_t e = 0; e < a.size(); ++e) a[e] = static_cast<float>((s.count[e] - n) / n);
  }
  return out;
}

void SigmoidGate::add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const {
  for (size_t s = 0; s < choice_.size(); ++s) {
    const int t = static_cast<int>(s) / config_.k, e = choice_[s];
    AuxStats& g = stats.at(static_cast<size_t>(group.at(static_cast<size_t>(t))));
    if (s % static_cast<size_t>(config_.k) == 0) g.tokens += 1;
    g.count.at(static_cast<size_t>(e)) += 1;
    g.value.at(static_cast<size_t>(e)) += sigmoid(h_.at(t, e));
  }
}

float SigmoidGate::aux_of(const AuxStats& stats) const {
  const double n = stats.tokens * config_.k / config_.experts;
  if (n <= 0) return 0.0f;
  double aux = 0;
  for (size_t e = 0; e < stats.count.size(); ++e) aux += (stats.count[e] - n) / n * stats.value[e];
  return static_cast<float>(aux);
}

GateOutput SigmoidGate::forward(const Tensor& x) {
  x_ = x;
  h_ = matmul(x, wg_);
  if (core::limits_groups(config_.router_groups, config_.router_group_top_k)) {
    Tensor affinity(h_.shape());
    for (int64_t i = 0; i < h_.size(); ++i) affinity[i] = sigmoid(h_[i]);
    choice_ = group_limited_topk_rows(h_, affinity, config_.k, config_.router_groups,
                                      config_.router_group_top_k);
  } else {
    choice_ = topk_rows(h_, config_.k);
  }
  GateOutput out;
  out.tokens = static_cast<int>(x.rows());
  out.experts = config_.experts;
  out.per_group = config_.k;
  for (size_t s = 0; s < choice_.size(); ++s) {
    const int t = static_cast<int>(s) / config_.k;
    out.token.push_back(t);
    out.expert.push_back(choice_[s]);
    out.weight.push_back(sigmoid(h_.at(t, choice_[s])));
  }
  if (x.rows() > 0) {
    const std::vector<float> imb = imbalance();
    double aux = 0;
    for (size_t s = 0; s < choice_.size(); ++s)
      aux += imb[static_cast<size_t>(choice_[s])] * out.weight[s];
    out.aux_loss = static_cast<float>(aux);
  }
  return out;
}

Tensor SigmoidGate::backward(const std::vector<float>& grad_weight, float grad_aux) {
  Tensor dh(h_.shape());
  const AuxGroups groups = take_aux_groups();
  const std::vector<float> imb = h_.rows() > 0 ? imbalance() : std::vector<float>();
  const std::vector<std::vector<float>> group_imb = imbalance(groups);
  for (size_t s = 0; s < choice_.size(); ++s) {
    const int t = static_cast<int>(s) / config_.k, e = choice_[s];
    const float sg = sigmoid(h_.at(t, e));
    const std::vector<float>& a =
        groups.empty() ? imb
                       : group_imb[static_cast<size_t>(groups.group.at(static_cast<size_t>(t)))];
    const float dw = grad_weight[s] + grad_aux * a[static_cast<size_t>(e)];
    dh.at(t, e) += dw * sg * (1.0f - sg);
  }
  gemm(Trans::kYes, Trans::kNo, 1.0f, x_, dh, 1.0f, dwg_);
  return matmul(dh, wg_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn

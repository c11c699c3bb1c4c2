#include "nn/expert_choice_gate.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "nn/gate_math.h"
#include "nn/gemm.h"

namespace moecomm::nn {
namespace {

Tensor transpose(const Tensor& a) {
  Tensor t({a.cols(), a.rows()});
  for (int64_t r = 0; r < a.rows(); ++r)
    for (int64_t c = 0; c < a.cols(); ++c) t.at(c, r) = a.at(r, c);
  return t;
}

}  // namespace

ExpertChoiceGate::ExpertChoiceGate(const ExpertChoiceGateConfig& config) : config_(config) {
  check_gate_shape(config.hidden, config.experts, 1, "expert-choice gate");
  if (!(config.capacity_factor > 0.0f))
    throw Error("expert-choice gate", "capacity_factor must be positive");
  const float bound = 1.0f / std::sqrt(static_cast<float>(config.hidden));
  wg_ = Tensor::uniform({config.hidden, config.experts}, config.seed, bound);
  dwg_ = Tensor(wg_.shape());
}

int ExpertChoiceGate::capacity(int tokens) const {
  // (1 - 1e-6): a float factor such as 0.8 must not round C up past an exact product.
  const double c = std::ceil(static_cast<double>(config_.capacity_factor) * tokens /
                             static_cast<double>(config_.experts) * (1.0 - 1e-6));
  return std::min(tokens, static_cast<int>(c));
}

GateOutput ExpertChoiceGate::forward(const Tensor& x) {
  x_ = x;
  p_ = softmax_rows(matmul(x, wg_));
  GateOutput out;
  out.tokens = static_cast<int>(x.rows());
  out.experts = config_.experts;
  out.expert_choice = true;
  out.per_group = capacity(out.tokens);
  if (out.per_group > 0) {
    const std::vector<int> pick = topk_rows(transpose(p_), out.per_group);  // [E * C]
    for (size_t s = 0; s < pick.size(); ++s) {
      const int e = static_cast<int>(s) / out.per_group;
      out.token.push_back(pick[s]);
      out.expert.push_back(e);
      out.weight.push_back(p_.at(pick[s], e));
    }
  }
  last_ = out;
  return out;
}

Tensor ExpertChoiceGate::backward(const std::vector<float>& grad_weight, float /*grad_aux*/) {
  Tensor dp(p_.shape());
  for (int s = 0; s < last_.slots(); ++s)
    dp.at(last_.token[static_cast<size_t>(s)], last_.expert[static_cast<size_t>(s)]) +=
        grad_weight[static_cast<size_t>(s)];
  const Tensor dh = softmax_rows_backward(p_, dp);
  gemm(Trans::kYes, Trans::kNo, 1.0f, x_, dh, 1.0f, dwg_);
  return matmul(dh, wg_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn

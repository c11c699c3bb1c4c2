#include "nn/xmoe_gate.h"

#include <cmath>

#include "core/error.h"
#include "nn/gate_math.h"
#include "nn/gemm.h"

namespace moecomm::nn {
namespace {

constexpr float kNormEps = 1e-6f;  // as F.normalize: rows are divided by max(|v|, eps)

// Unit rows of v; norms gets max(|v_r|, eps).
Tensor unit_rows(const Tensor& v, std::vector<float>& norms) {
  Tensor u(v.shape());
  norms.assign(static_cast<size_t>(v.rows()), 0.0f);
  for (int64_t r = 0; r < v.rows(); ++r) {
    double sq = 0;
    for (int64_t c = 0; c < v.cols(); ++c) sq += static_cast<double>(v.at(r, c)) * v.at(r, c);
    const float n = std::max(static_cast<float>(std::sqrt(sq)), kNormEps);
    norms[static_cast<size_t>(r)] = n;
    for (int64_t c = 0; c < v.cols(); ++c) u.at(r, c) = v.at(r, c) / n;
  }
  return u;
}

// Gradient through u = v / |v|: dv = (du - u <u, du>) / |v|.
Tensor unit_rows_backward(const Tensor& u, const std::vector<float>& norms, const Tensor& du) {
  Tensor dv(u.shape());
  for (int64_t r = 0; r < u.rows(); ++r) {
    double dot = 0;
    for (int64_t c = 0; c < u.cols(); ++c) dot += static_cast<double>(u.at(r, c)) * du.at(r, c);
    const float n = norms[static_cast<size_t>(r)];
    for (int64_t c = 0; c < u.cols(); ++c)
      dv.at(r, c) = (du.at(r, c) - u.at(r, c) * static_cast<float>(dot)) / n;
  }
  return dv;
}

}  // namespace

XMoEGate::XMoEGate(const XMoEGateConfig& config) : config_(config) {
  check_gate_shape(config.hidden, config.experts, config.k, "x-moe gate");
  check_gate_groups(config.experts, config.k, config.router_groups, config.router_group_top_k,
                    "x-moe gate");
  if (config.dim <= 0) throw Error("x-moe gate", "dim must be positive");
  if (!(config.temperature > 0.0f)) throw Error("x-moe gate", "temperature must be positive");
  const float bound = 1.0f / std::sqrt(static_cast<float>(config.hidden));
  wp_ = Tensor::uniform({config.hidden, config.dim}, config.seed, bound);
  embed_ = Tensor::randn({config.experts, config.dim}, config.seed + 1, 1.0f);
  dwp_ = Tensor(wp_.shape());
  dembed_ = Tensor(embed_.shape());
}

GateOutput XMoEGate::forward(const Tensor& x) {
  x_ = x;
  zhat_ = unit_rows(matmul(x, wp_), znorm_);
  ehat_ = unit_rows(embed_, enorm_);
  Tensor s({x.rows(), config_.experts});
  gemm(Trans::kNo, Trans::kYes, 1.0f / config_.temperature, zhat_, ehat_, 0.0f, s);
  p_ = softmax_rows(s);
  choice_ =
      group_limited_topk_rows(s, p_, config_.k, config_.router_groups, config_.router_group_top_k);
  return softmax_topk_output(p_, choice_, config_.experts, config_.k, normalized());
}

Tensor XMoEGate::backward(const std::vector<float>& grad_weight, float grad_aux) {
  const Tensor ds = softmax_topk_backward(p_, choice_, config_.k, normalized(), grad_weight,
                                          grad_aux, take_aux_groups());
  const float inv_tau = 1.0f / config_.temperature;
  const Tensor dzhat = matmul(ds, ehat_);  // scaled by 1/tau below
  const Tensor dehat = matmul(ds, zhat_, Trans::kYes, Trans::kNo);
  Tensor dz = unit_rows_backward(zhat_, znorm_, dzhat);
  Tensor de = unit_rows_backward(ehat_, enorm_, dehat);
  for (int64_t i = 0; i < dz.size(); ++i) dz[i] *= inv_tau;
  for (int64_t i = 0; i < de.size(); ++i) dembed_[i] += inv_tau * de[i];
  gemm(Trans::kYes, Trans::kNo, 1.0f, x_, dz, 1.0f, dwp_);
  return matmul(dz, wp_, Trans::kNo, Trans::kYes);
}

void XMoEGate::add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const {
  add_load_balance_stats(p_, choice_, config_.k, group, stats);
}

float XMoEGate::aux_of(const AuxStats& stats) const {
  return load_balance_of(stats);
}

}  // namespace moecomm::nn

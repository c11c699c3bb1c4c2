#include "nn/adam.h"

#include <cmath>

#include "core/error.h"

namespace moecomm::nn {

Adam::Adam(std::vector<Param*> params, AdamConfig config)
    : params_(std::move(params)), config_(config) {
  for (const Param* p : params_) {
    if (!p || !p->value || !p->grad || p->value->size() != p->grad->size())
      throw Error("adam", "every parameter needs a value and a gradient of its size");
    m_.emplace_back(p->value->shape());
    v_.emplace_back(p->value->shape());
  }
}

void Adam::step() {
  ++t_;
  const AdamConfig& c = config_;
  const double t = static_cast<double>(t_);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta2), t));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& w = *params_[i]->value;
    const Tensor& g = *params_[i]->grad;
    Tensor& m = m_[i];
    Tensor& v = v_[i];
    for (int64_t j = 0; j < w.size(); ++j) {
      m[j] = c.beta1 * m[j] + (1.0f - c.beta1) * g[j];
      v[j] = c.beta2 * v[j] + (1.0f - c.beta2) * g[j] * g[j];
      const float update = (m[j] / bc1) / (std::sqrt(v[j] / bc2) + c.eps);
      w[j] -= c.lr * (update + c.weight_decay * w[j]);
    }
  }
}

void Adam::zero_grad() {
  nn::zero_grad(params_);
}

void zero_grad(const std::vector<Param*>& params) {
  for (Param* p : params) p->grad->fill(0.0f);
}

void scale_grad(const std::vector<Param*>& params, float factor) {
  for (Param* p : params)
    for (float& g : p->grad->values()) g *= factor;
}

}  // namespace moecomm::nn

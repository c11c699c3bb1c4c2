#pragma once
// Central finite differences for the nn tests: compares an analytic gradient with
// (L(v + eps) - L(v - eps)) / (2 eps) per element, in fp32 forward passes with the loss
// accumulated in double. Elements whose perturbation changes the routing (a discontinuity
// of top-k / capacity) are skipped when a signature function is given.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "nn/tensor.h"

namespace moecomm::nn::testing {

struct GradCheckOptions {
  float eps = 1e-2f;
  float atol = 2e-3f;
  float rtol = 2e-2f;
};

// value: the tensor perturbed in place; analytic: its gradient; loss: recomputes L;
// signature: the routing (empty function: no check). Returns elements checked.
inline int check_gradient(const std::string& name, Tensor& value, const Tensor& analytic,
                          const std::function<double()>& loss,
                          const std::function<std::vector<int>()>& signature = {},
                          GradCheckOptions opt = {}) {
  const std::vector<int> base = signature ? signature() : std::vector<int>();
  int checked = 0;
  for (int64_t i = 0; i < value.size(); ++i) {
    const float v = value[i];
    value[i] = v + opt.eps;
    const double lp = loss();
    const bool same_p = !signature || signature() == base;
    value[i] = v - opt.eps;
    const double lm = loss();
    const bool same_m = !signature || signature() == base;
    value[i] = v;
    if (!same_p || !same_m) continue;
    const double fd = (lp - lm) / (2.0 * opt.eps);
    const double an = analytic[i];
    EXPECT_LE(std::fabs(fd - an), opt.atol + opt.rtol * std::max(std::fabs(fd), std::fabs(an)))
        << name << "[" << i << "]: finite difference " << fd << ", analytic " << an;
    ++checked;
  }
  loss();  // leave the caches of the unperturbed point
  return checked;
}

// sum of y * r in double.
inline double dot(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

}  // namespace moecomm::nn::testing

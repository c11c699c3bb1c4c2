#include "nn/layer_norm.h"

#include <cmath>

#include "core/error.h"

namespace moecomm::nn {

LayerNorm::LayerNorm(int hidden, float eps)
    : eps_(eps), gamma_({hidden}, 1.0f), beta_({hidden}), dgamma_({hidden}), dbeta_({hidden}) {
  if (hidden <= 0) throw Error("layer norm", "hidden must be positive");
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int64_t n = x.rows(), m = x.cols();
  if (m != gamma_.size()) throw Error("layer norm", "input width differs from hidden");
  xhat_ = Tensor(x.shape());
  rstd_.assign(static_cast<size_t>(n), 0.0f);
  Tensor y(x.shape());
  for (int64_t r = 0; r < n; ++r) {
    const float* in = x.row(r);
    double mean = 0, var = 0;
    for (int64_t c = 0; c < m; ++c) mean += in[c];
    mean /= static_cast<double>(m);
    for (int64_t c = 0; c < m; ++c) var += (in[c] - mean) * (in[c] - mean);
    var /= static_cast<double>(m);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps_));
    rstd_[static_cast<size_t>(r)] = rstd;
    float* h = xhat_.row(r);
    float* out = y.row(r);
    for (int64_t c = 0; c < m; ++c) {
      h[c] = static_cast<float>(in[c] - mean) * rstd;
      out[c] = gamma_[c] * h[c] + beta_[c];
    }
  }
  return y;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
Tensor LayerNorm::backward(const Tensor& dy) {
  const int64_t n = xhat_.rows(), m = xhat_.cols();
  if (dy.rows() != n || dy.cols() != m)
    throw Error("layer norm", "backward needs a forward first, and dy of its shape");
  Tensor dx(dy.shape());
  std::vector<float> g(static_cast<size_t>(m));
  for (int64_t r = 0; r < n; ++r) {
    const float* d = dy.row(r);
    const float* h = xhat_.row(r);
    double sg = 0, sgh = 0;
    for (int64_t c = 0; c < m; ++c) {
      dgamma_[c] += d[c] * h[c];
      dbeta_[c] += d[c];
      g[static_cast<size_t>(c)] = d[c] * gamma_[c];
      sg += g[static_cast<size_t>(c)];
      sgh += g[static_cast<size_t>(c)] * h[c];
    }
    const float mg = static_cast<float>(sg / static_cast<double>(m));
    const float mgh = static_cast<float>(sgh / static_cast<double>(m));
    const float rstd = rstd_[static_cast<size_t>(r)];
    float* out = dx.row(r);
    for (int64_t c = 0; c < m; ++c) out[c] = rstd * (g[static_cast<size_t>(c)] - mg - h[c] * mgh);
  }
  return dx;
}

}  // namespace moecomm::nn

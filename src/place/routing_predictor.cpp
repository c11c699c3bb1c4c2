#include "place/routing_predictor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace moecomm::place {

namespace {

// Ridge weight relative to the mean diagonal of A: small enough not to bias well-observed
// experts, large enough to keep A + lambda I well conditioned for experts seen rarely.
constexpr double kRidge = 1e-2;

// Solves M X = R in place for symmetric positive definite M (n x n) and R (n x m) by
// Cholesky; R becomes X.
void cholesky_solve(std::vector<double>& m, std::vector<double>& r, int n, int cols) {
  for (int j = 0; j < n; ++j) {
    double* row_j = &m[static_cast<size_t>(j) * n];
    for (int k = 0; k < j; ++k) row_j[j] -= row_j[k] * row_j[k];
    row_j[j] = std::sqrt(row_j[j]);
    for (int i = j + 1; i < n; ++i) {
      double* row_i = &m[static_cast<size_t>(i) * n];
      for (int k = 0; k < j; ++k) row_i[j] -= row_i[k] * row_j[k];
      row_i[j] /= row_j[j];
    }
  }
  for (int c = 0; c < cols; ++c) {  // L z = r, then L^T x = z, column by column
    for (int i = 0; i < n; ++i) {
      double v = r[static_cast<size_t>(i) * cols + c];
      for (int k = 0; k < i; ++k)
        v -= m[static_cast<size_t>(i) * n + k] * r[static_cast<size_t>(k) * cols + c];
      r[static_cast<size_t>(i) * cols + c] = v / m[static_cast<size_t>(i) * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {
      double v = r[static_cast<size_t>(i) * cols + c];
      for (int k = i + 1; k < n; ++k)
        v -= m[static_cast<size_t>(k) * n + i] * r[static_cast<size_t>(k) * cols + c];
      r[static_cast<size_t>(i) * cols + c] = v / m[static_cast<size_t>(i) * n + i];
    }
  }
}

}  // namespace

RoutingPredictor::RoutingPredictor(int layers, int experts, double decay)
    : experts_(experts), decay_(decay) {
  if (layers < 1 || experts < 1) throw Error("routing predictor", "needs layers, experts >= 1");
  if (!(decay >= 0 && decay < 1)) {
    throw Error("routing predictor", "decay must be in [0, 1), got " + std::to_string(decay));
  }
  const size_t square = static_cast<size_t>(experts) * experts;
  gram_.assign(layers, std::vector<double>(square, 0.0));
  cross_.assign(layers, std::vector<double>(square, 0.0));
  weights_.assign(layers, {});
}

void RoutingPredictor::check(int layer, const RoutingCounts& counts) const {
  if (layer < 0 || layer >= static_cast<int>(gram_.size())) {
    throw Error("routing predictor", "layer " + std::to_string(layer) + " outside [0, " +
                                         std::to_string(gram_.size()) + ")");
  }
  if (counts.experts != experts_) {
    throw Error("routing predictor", "counts have " + std::to_string(counts.experts) +
                                         " experts, expected " + std::to_string(experts_));
  }
}

void RoutingPredictor::observe(int layer, const RoutingCounts& now, const RoutingCounts& next) {
  check(layer, now);
  check(layer, next);
  if (now.samples != next.samples) {
    throw Error("routing predictor", "layers l and l+1 have different sample counts");
  }
  std::vector<double>& a = gram_[layer];
  std::vector<double>& b = cross_[layer];
  const double keep = has_statistics(layer) ? decay_ : 0.0;
  for (double& v : a) v *= keep;
  for (double& v : b) v *= keep;
  std::vector<double> x(experts_);
  for (int i = 0; i < now.samples; ++i) {
    double tokens = 0;
    for (int e = 0; e < experts_; ++e) tokens += now.at(i, e);
    if (tokens == 0) continue;
    for (int e = 0; e < experts_; ++e) x[e] = now.at(i, e) / tokens;
    for (int e = 0; e < experts_; ++e) {
      if (x[e] == 0) continue;
      double* a_row = &a[static_cast<size_t>(e) * experts_];
      double* b_row = &b[static_cast<size_t>(e) * experts_];
      for (int f = 0; f < experts_; ++f) {
        a_row[f] += x[e] * x[f];
        b_row[f] += x[e] * next.at(i, f);
      }
    }
  }
  solve_weights(layer);
}

void RoutingPredictor::solve_weights(int layer) {
  std::vector<double> m = gram_[layer];
  double trace = 0;
  for (int e = 0; e < experts_; ++e) trace += m[static_cast<size_t>(e) * experts_ + e];
  const double lambda = kRidge * (trace > 0 ? trace / experts_ : 1.0);
  for (int e = 0; e < experts_; ++e) m[static_cast<size_t>(e) * experts_ + e] += lambda;
  weights_[layer] = cross_[layer];
  cholesky_solve(m, weights_[layer], experts_, experts_);
}

RoutingCounts RoutingPredictor::predict(int layer, const RoutingCounts& now) const {
  check(layer, now);
  RoutingCounts predicted(now.samples, experts_);
  if (!has_statistics(layer)) return predicted;
  const std::vector<double>& w = weights_[layer];
  std::vector<double> y(experts_);
  for (int i = 0; i < now.samples; ++i) {
    double tokens = 0;
    for (int e = 0; e < experts_; ++e) tokens += now.at(i, e);
    if (tokens == 0) continue;
    std::fill(y.begin(), y.end(), 0.0);
    for (int e = 0; e < experts_; ++e) {
      if (now.at(i, e) == 0) continue;
      const double share = now.at(i, e) / tokens;
      const double* row = &w[static_cast<size_t>(e) * experts_];
      for (int f = 0; f < experts_; ++f) y[f] += share * row[f];
    }
    // A conditional mean of counts is never negative; the linear fit can dip below zero.
    for (int f = 0; f < experts_; ++f)
      predicted.at(i, f) = std::max<int64_t>(0, std::llround(y[f]));
  }
  return predicted;
}

double prediction_error(const RoutingCounts& predicted, const RoutingCounts& actual) {
  if (predicted.num.size() != actual.num.size()) {
    throw Error("prediction error", "count shapes differ");
  }
  int64_t diff = 0, total = 0;
  for (size_t x = 0; x < actual.num.size(); ++x) {
    diff += std::llabs(predicted.num[x] - actual.num[x]);
    total += actual.num[x];
  }
  return total > 0 ? static_cast<double>(diff) / total : 0.0;
}

}  // namespace moecomm::place

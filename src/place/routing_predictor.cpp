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
// Cholesky; R becomes X. The substitutions update whole rows of R at a time (contiguous, in the
// same order of operations as column by column), so they stream through memory.
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
  auto row = [&](int i) { return &r[static_cast<size_t>(i) * cols]; };
  for (int i = 0; i < n; ++i) {  // L Z = R
    double* out = row(i);
    for (int k = 0; k < i; ++k) {
      const double l = m[static_cast<size_t>(i) * n + k];
      const double* z = row(k);
      for (int c = 0; c < cols; ++c) out[c] -= l * z[c];
    }
    const double d = m[static_cast<size_t>(i) * n + i];
    for (int c = 0; c < cols; ++c) out[c] /= d;
  }
  for (int i = n - 1; i >= 0; --i) {  // L^T X = Z
    double* out = row(i);
    for (int k = i + 1; k < n; ++k) {
      const double l = m[static_cast<size_t>(k) * n + i];
      const double* x = row(k);
      for (int c = 0; c < cols; ++c) out[c] -= l * x[c];
    }
    const double d = m[static_cast<size_t>(i) * n + i];
    for (int c = 0; c < cols; ++c) out[c] /= d;
  }
}

}  // namespace

double predictor_update_flops(int experts) {
  const double e = experts;
  return e * e * e / 3 + 2 * e * e * e;  // Cholesky, then both substitutions for E columns
}

void check_predictor_size(int layers, int experts, int64_t updates) {
  const std::string what = std::to_string(experts) + " experts";
  const std::string reduce =
      ": reduce the experts (a trace's \"experts\", place --experts) or the layers";
  if (experts > kMaxPredictorExperts)
    throw Error("routing predictor", what + " is more than the " +
                                         std::to_string(kMaxPredictorExperts) +
                                         " it handles (its statistics are E x E per layer and "
                                         "each update solves them in O(E^3))" +
                                         reduce);
  const double bytes = 3.0 * layers * double(experts) * experts * sizeof(double);
  if (bytes > kMaxPredictorBytes)
    throw Error("routing predictor", std::to_string(layers) + " layers x " + what + " need " +
                                         std::to_string(int64_t(bytes / 1e6)) +
                                         " MB of statistics (3 E x E per layer), "
                                         "more than " +
                                         std::to_string(int64_t(kMaxPredictorBytes / 1e6)) + " MB" +
                                         reduce);
  const double flops = double(updates) * predictor_update_flops(experts);
  if (flops > kMaxPredictorFlops)
    throw Error("routing predictor", std::to_string(updates) + " updates of " + what +
                                         " take about " + std::to_string(int64_t(flops / 1e9)) +
                                         " Gflop (E^3 each), more than " +
                                         std::to_string(int64_t(kMaxPredictorFlops / 1e9)) +
                                         ": reduce the experts, the layers or the iterations");
}

RoutingPredictor::RoutingPredictor(int layers, int experts, double decay)
    : experts_(experts), decay_(decay) {
  if (layers < 1 || experts < 1) throw Error("routing predictor", "needs layers, experts >= 1");
  check_predictor_size(layers, experts, 0);
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

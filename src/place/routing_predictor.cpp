#include "place/routing_predictor.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace moecomm::place {

RoutingPredictor::RoutingPredictor(int layers, int experts, double decay)
    : experts_(experts), decay_(decay) {
  if (layers < 1 || experts < 1) throw Error("routing predictor", "needs layers, experts >= 1");
  if (!(decay >= 0 && decay < 1)) {
    throw Error("routing predictor", "decay must be in [0, 1), got " + std::to_string(decay));
  }
  transition_.assign(layers, std::vector<double>(static_cast<size_t>(experts) * experts, 0.0));
  observed_.assign(layers, 0);
}

void RoutingPredictor::check(int layer, const RoutingCounts& counts) const {
  if (layer < 0 || layer >= static_cast<int>(transition_.size())) {
    throw Error("routing predictor", "layer " + std::to_string(layer) + " outside [0, " +
                                         std::to_string(transition_.size()) + ")");
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
  std::vector<double>& t = transition_[layer];
  const double keep = observed_[layer] ? decay_ : 0.0;
  for (double& v : t) v *= keep;
  for (int i = 0; i < now.samples; ++i) {
    double tokens = 0;
    for (int e = 0; e < experts_; ++e) tokens += now.at(i, e);
    if (tokens == 0) continue;
    for (int e = 0; e < experts_; ++e) {
      if (now.at(i, e) == 0) continue;
      const double share = now.at(i, e) / tokens;
      double* row = &t[static_cast<size_t>(e) * experts_];
      for (int f = 0; f < experts_; ++f) row[f] += share * next.at(i, f);
    }
  }
  observed_[layer] = 1;
}

RoutingCounts RoutingPredictor::predict(int layer, const RoutingCounts& now) const {
  check(layer, now);
  RoutingCounts predicted(now.samples, experts_);
  if (!observed_[layer]) return predicted;
  const std::vector<double>& t = transition_[layer];
  // Row-normalised statistic; an expert never seen at layer l falls back to the layer's
  // overall next-expert popularity.
  std::vector<double> popularity(experts_, 0.0), p(t.size(), 0.0);
  for (size_t x = 0; x < t.size(); ++x) popularity[x % experts_] += t[x];
  double all = 0;
  for (double v : popularity) all += v;
  for (int e = 0; e < experts_; ++e) {
    const double* row = &t[static_cast<size_t>(e) * experts_];
    double sum = 0;
    for (int f = 0; f < experts_; ++f) sum += row[f];
    for (int f = 0; f < experts_; ++f) {
      p[static_cast<size_t>(e) * experts_ + f] = sum > 0 ? row[f] / sum : popularity[f] / all;
    }
  }
  std::vector<double> expected(experts_);
  for (int i = 0; i < now.samples; ++i) {
    std::fill(expected.begin(), expected.end(), 0.0);
    for (int e = 0; e < experts_; ++e) {
      if (now.at(i, e) == 0) continue;
      const double* row = &p[static_cast<size_t>(e) * experts_];
      for (int f = 0; f < experts_; ++f) expected[f] += now.at(i, e) * row[f];
    }
    for (int f = 0; f < experts_; ++f) predicted.at(i, f) = std::llround(expected[f]);
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

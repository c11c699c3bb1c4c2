#pragma once
// Predicts layer l+1's routing counts before its gate runs (NetMoE Sec. 3.3: "predicted
// through routing frequency statistics"). The statistics, per layer, are the second moments
// of routing over the samples of earlier iterations: A = sum_i x_i x_i^T and
// B = sum_i x_i y_i^T, where x_i is sample i's share of tokens per expert at layer l and
// y_i its counts at layer l+1, decayed each iteration so they follow routing that drifts
// during training. The prediction is the least-squares (ridge) estimate of the conditional
// mean, y = x W with (A + lambda I) W = B. Unlike plain co-routing frequencies, which
// smear a sample's next-layer mass over the successors of every expert it touched, the
// regression separates the experts a sample shares with others, so a sample whose tokens
// sit on experts {a, b} is predicted onto the successors of a and b. W is solved once per
// layer when its statistics change, after the iteration, off the critical path:
// O(E^3) then, O(I E^2) per prediction.
#include <cstdint>
#include <vector>

#include "place/routing.h"

namespace moecomm::place {

// The predictor's limits: its statistics take 3 E^2 doubles per layer, and each update (one
// observe()) costs predictor_update_flops(E), about 2.3 E^3: E = 1000 is 2.3 Gflop.
inline constexpr int kMaxPredictorExperts = 2048;
inline constexpr double kMaxPredictorBytes = 4e9;
inline constexpr double kMaxPredictorFlops = 3e10;  // seconds on one core, not minutes

double predictor_update_flops(int experts);
// Throws moecomm::Error naming the limit and what to reduce when a predictor of `layers` x
// `experts` would exceed the limits above, or `updates` observations would.
void check_predictor_size(int layers, int experts, int64_t updates);

class RoutingPredictor {
 public:
  // decay in [0, 1): weight kept by the old statistics at each observation.
  RoutingPredictor(int layers, int experts, double decay = 0.5);

  // True layer-l and layer-(l+1) counts of the same samples, once both are known.
  void observe(int layer, const RoutingCounts& now, const RoutingCounts& next);
  bool has_statistics(int layer) const { return !weights_.at(layer).empty(); }

  // Predicted counts of layer+1 for the samples whose layer counts are `now`, rounded to
  // whole tokens. All zero before any observation: the placement then optimises the gather
  // alone.
  RoutingCounts predict(int layer, const RoutingCounts& now) const;

 private:
  void check(int layer, const RoutingCounts& counts) const;
  void solve_weights(int layer);

  int experts_;
  double decay_;
  std::vector<std::vector<double>> gram_, cross_;  // per layer: A and B, E x E
  std::vector<std::vector<double>> weights_;       // per layer: W, E x E; empty if unknown
};

// sum |predicted - actual| / sum actual: 0 is a perfect prediction.
double prediction_error(const RoutingCounts& predicted, const RoutingCounts& actual);

}  // namespace moecomm::place

#pragma once
// Predicts layer l+1's routing counts before its gate runs (NetMoE Sec. 3.3: "predicted
// through routing frequency statistics"). Statistic: for each layer, how often a sample's
// tokens at expert e in layer l go on to expert e' in layer l+1, accumulated from earlier
// iterations as the count product sum_i num_l[i][e] num_{l+1}[i][e'] / tokens_i (the
// expected co-routing when a sample's tokens are exchangeable), decayed so the statistic
// follows routing that drifts during training. A sample's prediction is its counts at
// layer l pushed through the row-normalised statistic.
#include <vector>

#include "place/routing.h"

namespace moecomm::place {

class RoutingPredictor {
 public:
  // decay in [0, 1): weight kept by the old statistic at each observation.
  RoutingPredictor(int layers, int experts, double decay = 0.5);

  // True layer-l and layer-(l+1) counts of the same samples, once both are known.
  void observe(int layer, const RoutingCounts& now, const RoutingCounts& next);
  bool has_statistics(int layer) const { return observed_.at(layer); }

  // Predicted counts of layer+1 for the samples whose layer counts are `now`, rounded to
  // whole tokens (so a sample's total is kept up to rounding). All zero before any
  // observation: the placement then optimises the gather alone.
  RoutingCounts predict(int layer, const RoutingCounts& now) const;

 private:
  void check(int layer, const RoutingCounts& counts) const;

  int experts_;
  double decay_;
  std::vector<std::vector<double>> transition_;  // per layer l < layers-1: E x E
  std::vector<char> observed_;
};

// sum |predicted - actual| / sum actual: 0 is a perfect prediction.
double prediction_error(const RoutingCounts& predicted, const RoutingCounts& actual);

}  // namespace moecomm::place

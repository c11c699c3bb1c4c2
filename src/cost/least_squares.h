#pragma once
// Least-squares fit of an alpha-beta line to measured (size, time) samples, as FSMoE
// Section 6.2 fits its performance models from micro-benchmarks.
#include <utility>
#include <vector>

#include "cost/alpha_beta.h"

namespace moecomm::cost {

struct LineFit {
  AlphaBeta line;
  double r_squared = 1.0;  // coefficient of determination of the fit
};

// samples: (size, seconds). Needs at least two distinct sizes; throws moecomm::Error
// otherwise, or on negative/non-finite values.
LineFit fit_alpha_beta(const std::vector<std::pair<double, double>>& samples);

}  // namespace moecomm::cost

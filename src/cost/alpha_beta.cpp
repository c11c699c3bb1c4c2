#include "cost/alpha_beta.h"

#include <algorithm>
#include <limits>

namespace moecomm::cost {

double AlphaBeta::inverse(double t) const {
  if (beta <= 0.0) return t >= alpha ? std::numeric_limits<double>::infinity() : 0.0;
  return std::max(0.0, (t - alpha) / beta);
}

}  // namespace moecomm::cost

#pragma once
// Order statistics of measured times (profile, bench and infer report medians and p95s).
#include <vector>

namespace moecomm::core {

// Linear interpolation between order statistics, q in [0, 1]; 0 for no values.
double quantile(std::vector<double> values, double q);
// quantile(values, 0.5): the middle value, or the mean of the two middle ones.
double median(std::vector<double> values);

}  // namespace moecomm::core

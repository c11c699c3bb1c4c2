#include "cost/efficiency_curve.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::cost {

EfficiencyCurve::EfficiencyCurve(std::vector<std::pair<double, double>> points,
                                 const std::string& where)
    : points_(std::move(points)) {
  std::sort(points_.begin(), points_.end());
  for (size_t i = 0; i < points_.size(); ++i) {
    const auto& [bytes, eff] = points_[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!(bytes > 0)) throw Error(at, "message size must be positive");
    if (!(eff > 0 && eff <= 1)) throw Error(at, "efficiency must be in (0, 1]");
    if (i > 0 && points_[i - 1].first == bytes) throw Error(at, "duplicate message size");
  }
}

double EfficiencyCurve::at(double bytes) const {
  if (points_.empty()) return 1.0;
  if (bytes <= points_.front().first) return points_.front().second;
  if (bytes >= points_.back().first) return points_.back().second;
  auto hi = std::upper_bound(points_.begin(), points_.end(), std::make_pair(bytes, 2.0));
  auto lo = hi - 1;
  double w = (bytes - lo->first) / (hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

}  // namespace moecomm::cost

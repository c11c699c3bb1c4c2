#pragma once
// MoNTA's communication efficiency r(volume): the fraction of the theoretical bandwidth a
// collective reaches at a given message size, measured at a few sizes. Piecewise-linear
// between the points, clamped to the first/last point outside them.
#include <string>
#include <utility>
#include <vector>

namespace moecomm::cost {

class EfficiencyCurve {
 public:
  EfficiencyCurve() = default;  // empty curve: efficiency 1 everywhere
  // points: (bytes, efficiency in (0, 1]); sorted by bytes here. Throws moecomm::Error
  // (naming `where`) on non-positive sizes, efficiencies outside (0, 1] or duplicate sizes.
  explicit EfficiencyCurve(std::vector<std::pair<double, double>> points,
                           const std::string& where = "efficiency curve");

  double at(double bytes) const;
  bool empty() const { return points_.empty(); }
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

}  // namespace moecomm::cost

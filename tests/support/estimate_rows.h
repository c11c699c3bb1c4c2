#pragma once
// One strategy's row of the planner's estimates, by name.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "plan/strategy_table.h"

namespace moecomm::plan {

// The estimate named `name`; throws (the test fails, naming it) when the planner has none.
inline const StrategyEstimate& estimate_row(const ModelEstimates& p, const std::string& name) {
  const auto it = std::find_if(p.strategies.begin(), p.strategies.end(),
                               [&](const StrategyEstimate& s) { return s.name == name; });
  if (it == p.strategies.end()) throw std::out_of_range("no estimate row " + name);
  return *it;
}

}  // namespace moecomm::plan

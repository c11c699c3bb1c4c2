#include "nn/capacity_order.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace moecomm::nn {

CapacityOrder::CapacityOrder(float capacity_factor) : capacity_factor_(capacity_factor) {
  if (!(capacity_factor > 0.0f) || !std::isfinite(capacity_factor))
    throw Error("capacity order",
                "capacity_factor must be positive, got " + std::to_string(capacity_factor));
}

int CapacityOrder::capacity(const GateOutput& gate) const {
  if (gate.experts <= 0) return 0;
  // (1 - 1e-6): a float factor such as 1.1 must not round C up past an exact product.
  return static_cast<int>(std::ceil(static_cast<double>(capacity_factor_) * gate.slots() /
                                    static_cast<double>(gate.experts) * (1.0 - 1e-6)));
}

OrderPlan CapacityOrder::plan(const GateOutput& gate) const {
  const int cap = capacity(gate);
  std::vector<std::vector<int>> rows_of(static_cast<size_t>(gate.experts));
  std::vector<int> dropped(static_cast<size_t>(gate.experts), 0);
  for (int s : priority_order(gate)) {
    const size_t e = static_cast<size_t>(gate.expert[static_cast<size_t>(s)]);
    if (static_cast<int>(rows_of[e].size()) < cap)
      rows_of[e].push_back(s);
    else
      ++dropped[e];
  }
  OrderPlan plan =
      make_plan(gate, rows_of, std::vector<int>(static_cast<size_t>(gate.experts), cap));
  plan.capacity = cap;
  plan.dropped_per_expert = dropped;
  for (int d : dropped) plan.dropped += d;
  return plan;
}

}  // namespace moecomm::nn

#include "nn/dropless_order.h"

namespace moecomm::nn {

OrderPlan DroplessOrder::plan(const GateOutput& gate) const {
  std::vector<std::vector<int>> rows_of(static_cast<size_t>(gate.experts));
  for (int s : priority_order(gate))
    rows_of[static_cast<size_t>(gate.expert[static_cast<size_t>(s)])].push_back(s);
  std::vector<int> counts;
  for (const auto& list : rows_of) counts.push_back(static_cast<int>(list.size()));
  return make_plan(gate, rows_of, counts);
}

}  // namespace moecomm::nn

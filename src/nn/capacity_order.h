#pragma once
// Capacity layout [E, C, M] (GShard Sec. 2.2; Tutel): C = ceil(f * S / E) with S the gate's
// slot count (T k for top-k, E C' for expert choice) and f the capacity factor. Each expert
// keeps its first C slots in priority order; the rest are dropped (their tokens get no
// output from that expert) and counted in OrderPlan::dropped(_per_expert).
#include "nn/order.h"

namespace moecomm::nn {

class CapacityOrder : public Order {
 public:
  explicit CapacityOrder(float capacity_factor);
  OrderPlan plan(const GateOutput& gate) const override;
  int capacity(const GateOutput& gate) const;

 private:
  float capacity_factor_;
};

}  // namespace moecomm::nn

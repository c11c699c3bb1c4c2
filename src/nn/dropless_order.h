#pragma once
// Dropless layout (Megablocks; Tutel's dynamic capacity): expert e gets exactly the slots
// routed to it, rows contiguous per expert at OrderPlan::offsets; nothing is dropped or padded.
#include "nn/order.h"

namespace moecomm::nn {

class DroplessOrder : public Order {
 public:
  OrderPlan plan(const GateOutput& gate) const override;
};

}  // namespace moecomm::nn

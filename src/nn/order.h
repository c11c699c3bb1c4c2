#pragma once
// The Order module (FSMoE Sec. 3.1): lays the gate's slots out expert-major, so that expert
// e's rows are contiguous: rows [offsets[e], offsets[e + 1]) of the buffer [rows, M].
// Two layouts, both described by an OrderPlan:
//   capacity (GShard): every expert has exactly C rows, [E, C, M]; slots past C are dropped
//     and counted; unused rows are padding (token -1, weight 0, zero input).
//   dropless (Megablocks / Tutel dynamic): expert e has as many rows as slots routed to it.
// Within an expert, rows follow the gate's priority: token choice by choice rank then token
// (all first choices before any second choice, GShard Algorithm 1); expert choice by the
// expert's pick order.
#include <vector>

#include "nn/gate.h"
#include "nn/tensor.h"

namespace moecomm::nn {

struct OrderPlan {
  int tokens = 0;
  int experts = 0;
  int slots = 0;                        // the gate's slot count
  int capacity = -1;                    // C of the capacity layout; -1 when dropless
  std::vector<int> counts;              // [E] rows of expert e in the buffer (C each with capacity)
  std::vector<int> offsets;             // [E + 1] prefix sums of counts
  std::vector<int> row_token;           // [rows] source token of the row, -1 for padding
  std::vector<int> row_slot;            // [rows] gate slot of the row, -1 for padding
  std::vector<float> row_weight;        // [rows] combine weight, 0 for padding
  std::vector<int> dropped_per_expert;  // [E] slots dropped by capacity
  int dropped = 0;                      // total slots dropped

  int rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

class Order {
 public:
  virtual ~Order() = default;
  virtual OrderPlan plan(const GateOutput& gate) const = 0;
};

// Slot indices in priority order (see above).
std::vector<int> priority_order(const GateOutput& gate);

// Builds a plan from per-expert row lists (slot indices) and per-expert row counts
// (>= the list sizes; the rest is padding).
OrderPlan make_plan(const GateOutput& gate, const std::vector<std::vector<int>>& rows_of,
                    const std::vector<int>& counts);

// Order forward: buf [rows, M], row r = x[row_token[r]] (0 for padding).
Tensor order_rows(const OrderPlan& plan, const Tensor& x);
// Order backward: dx [T, M], dx[t] = sum of dbuf rows whose token is t.
Tensor order_rows_backward(const OrderPlan& plan, const Tensor& dbuf);

}  // namespace moecomm::nn

#include "nn/order.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::nn {

std::vector<int> priority_order(const GateOutput& gate) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(gate.slots()));
  if (gate.expert_choice) {
    for (int s = 0; s < gate.slots(); ++s) order.push_back(s);
    return order;
  }
  const int k = gate.per_group;
  for (int j = 0; j < k; ++j)
    for (int t = 0; t < gate.tokens; ++t) order.push_back(t * k + j);
  return order;
}

OrderPlan make_plan(const GateOutput& gate, const std::vector<std::vector<int>>& rows_of,
                    const std::vector<int>& counts) {
  OrderPlan plan;
  plan.tokens = gate.tokens;
  plan.experts = gate.experts;
  plan.slots = gate.slots();
  plan.counts = counts;
  plan.offsets.assign(static_cast<size_t>(gate.experts) + 1, 0);
  for (int e = 0; e < gate.experts; ++e)
    plan.offsets[static_cast<size_t>(e) + 1] =
        plan.offsets[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
  plan.row_token.assign(static_cast<size_t>(plan.rows()), -1);
  plan.row_slot.assign(static_cast<size_t>(plan.rows()), -1);
  plan.row_weight.assign(static_cast<size_t>(plan.rows()), 0.0f);
  for (int e = 0; e < gate.experts; ++e) {
    const std::vector<int>& list = rows_of[static_cast<size_t>(e)];
    for (size_t i = 0; i < list.size(); ++i) {
      const size_t r = static_cast<size_t>(plan.offsets[static_cast<size_t>(e)]) + i;
      const size_t s = static_cast<size_t>(list[i]);
      plan.row_token[r] = gate.token[s];
      plan.row_slot[r] = list[i];
      plan.row_weight[r] = gate.weight[s];
    }
  }
  plan.dropped_per_expert.assign(static_cast<size_t>(gate.experts), 0);
  return plan;
}

Tensor order_rows(const OrderPlan& plan, const Tensor& x) {
  if (x.rows() != plan.tokens) throw Error("order", "input rows differ from the gate's tokens");
  Tensor buf({plan.rows(), x.cols()});
  for (int r = 0; r < plan.rows(); ++r) {
    const int t = plan.row_token[static_cast<size_t>(r)];
    if (t >= 0) std::copy(x.row(t), x.row(t) + x.cols(), buf.row(r));
  }
  return buf;
}

Tensor order_rows_backward(const OrderPlan& plan, const Tensor& dbuf) {
  if (dbuf.rows() != plan.rows()) throw Error("order backward", "buffer rows differ from plan");
  Tensor dx({plan.tokens, dbuf.cols()});
  for (int r = 0; r < plan.rows(); ++r) {
    const int t = plan.row_token[static_cast<size_t>(r)];
    if (t < 0) continue;
    const float* g = dbuf.row(r);
    float* d = dx.row(t);
    for (int64_t c = 0; c < dbuf.cols(); ++c) d[c] += g[c];
  }
  return dx;
}

}  // namespace moecomm::nn

#pragma once
// The I-Order module (FSMoE Sec. 3.1): the reverse of Order. Expert outputs, expert-major
// [rows, M] as laid out by an OrderPlan, are scattered back to their tokens and weighted by
// the gate's combine weights:  y[t] = sum over rows r of token t of weight_r * buf[r].
#include <vector>

#include "nn/order.h"

namespace moecomm::nn {

Tensor iorder(const OrderPlan& plan, const Tensor& buf);

struct IOrderGrad {
  Tensor dbuf;                     // [rows, M]: dbuf[r] = weight_r * dy[token_r]
  std::vector<float> grad_weight;  // [slots]: <dy[token_r], buf[r]>; 0 for dropped slots
};

// buf: the forward's expert outputs; dy [T, M].
IOrderGrad iorder_backward(const OrderPlan& plan, const Tensor& buf, const Tensor& dy);

}  // namespace moecomm::nn

#include "nn/iorder.h"

#include "core/error.h"

namespace moecomm::nn {

Tensor iorder(const OrderPlan& plan, const Tensor& buf) {
  if (buf.rows() != plan.rows()) throw Error("i-order", "buffer rows differ from plan");
  Tensor y({plan.tokens, buf.cols()});
  for (int r = 0; r < plan.rows(); ++r) {
    const int t = plan.row_token[static_cast<size_t>(r)];
    if (t < 0) continue;
    const float w = plan.row_weight[static_cast<size_t>(r)];
    const float* b = buf.row(r);
    float* out = y.row(t);
    for (int64_t c = 0; c < buf.cols(); ++c) out[c] += w * b[c];
  }
  return y;
}

IOrderGrad iorder_backward(const OrderPlan& plan, const Tensor& buf, const Tensor& dy) {
  if (buf.rows() != plan.rows() || dy.rows() != plan.tokens)
    throw Error("i-order backward", "shapes differ from plan");
  IOrderGrad g{Tensor(buf.shape()), std::vector<float>(static_cast<size_t>(plan.slots), 0.0f)};
  for (int r = 0; r < plan.rows(); ++r) {
    const int t = plan.row_token[static_cast<size_t>(r)];
    if (t < 0) continue;
    const float w = plan.row_weight[static_cast<size_t>(r)];
    const float* b = buf.row(r);
    const float* d = dy.row(t);
    float* out = g.dbuf.row(r);
    double dot = 0;
    for (int64_t c = 0; c < buf.cols(); ++c) {
      out[c] = w * d[c];
      dot += static_cast<double>(d[c]) * b[c];
    }
    g.grad_weight[static_cast<size_t>(plan.row_slot[static_cast<size_t>(r)])] =
        static_cast<float>(dot);
  }
  return g;
}

}  // namespace moecomm::nn

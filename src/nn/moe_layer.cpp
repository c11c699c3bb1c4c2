#include "nn/moe_layer.h"

#include <string>

#include "core/error.h"
#include "nn/iorder.h"

namespace moecomm::nn {

MoeLayer::MoeLayer(std::unique_ptr<Gate> gate, std::unique_ptr<Order> order,
                   std::vector<std::unique_ptr<Expert>> experts, int num_experts,
                   TokenExchange& exchange)
    : gate_(std::move(gate)),
      order_(std::move(order)),
      experts_(std::move(experts)),
      num_experts_(num_experts),
      exchange_(exchange) {
  if (!gate_ || !order_) throw Error("moe layer", "gate and order are required");
  const int ranks = exchange_.ranks();
  if (num_experts <= 0 || ranks <= 0 || num_experts % ranks != 0)
    throw Error("moe layer", "experts (" + std::to_string(num_experts) +
                                 ") must be a positive multiple of the EP size (" +
                                 std::to_string(ranks) + ")");
  if (local_experts() != num_experts / ranks)
    throw Error("moe layer", "holds " + std::to_string(local_experts()) + " experts, expected " +
                                 std::to_string(num_experts / ranks));
}

int MoeLayer::first_expert() const {
  return exchange_.rank() * local_experts();
}

Tensor MoeLayer::run_experts(const Tensor& recv) {
  Tensor out(recv.shape());
  caches_.assign(experts_.size(), ExpertCache{});
  for (int l = 0; l < local_experts(); ++l) {
    const int n = layout_.local_rows(l), at = layout_.local_offset(l);
    if (n == 0) continue;
    const Tensor y = experts_[static_cast<size_t>(l)]->forward(recv.slice_rows(at, n),
                                                               caches_[static_cast<size_t>(l)]);
    out.set_rows(at, y);
  }
  return out;
}

Tensor MoeLayer::forward(const Tensor& x) {
  Tensor h = x;
  hooks_.run(HookPoint::kBeforeMoeStart, h);
  routing_ = gate_->forward(h);  // Gate
  if (routing_.experts != num_experts_)
    throw Error("moe layer", "gate routes to " + std::to_string(routing_.experts) +
                                 " experts, layer has " + std::to_string(num_experts_));
  plan_ = order_->plan(routing_);  // Order
  Tensor send = order_rows(plan_, h);
  hooks_.run(HookPoint::kBeforeDispatch, send);
  layout_ = exchange_.exchange_counts(plan_.counts);  // Dispatch
  Tensor recv = exchange_.dispatch(send, layout_);
  hooks_.run(HookPoint::kAfterDispatch, recv);
  Tensor out = run_experts(recv);  // Expert
  hooks_.run(HookPoint::kBeforeCombine, out);
  combined_ = exchange_.combine(out, layout_);  // Combine
  hooks_.run(HookPoint::kAfterCombine, combined_);
  Tensor y = iorder(plan_, combined_);  // I-Order
  hooks_.run(HookPoint::kBeforeMoeEnd, y);
  has_forward_ = true;
  return y;
}

Tensor MoeLayer::backward_experts(const Tensor& dout) {
  Tensor din(dout.shape());
  for (int l = 0; l < local_experts(); ++l) {
    const int n = layout_.local_rows(l), at = layout_.local_offset(l);
    if (n == 0) continue;
    const Tensor d = experts_[static_cast<size_t>(l)]->backward(dout.slice_rows(at, n),
                                                                caches_[static_cast<size_t>(l)]);
    din.set_rows(at, d);
  }
  return din;
}

Tensor MoeLayer::backward(const Tensor& dy, float aux_grad) {
  if (!has_forward_) throw Error("moe layer", "backward needs a forward first");
  IOrderGrad g = iorder_backward(plan_, combined_, dy);     // I-Order
  const Tensor dout = exchange_.dispatch(g.dbuf, layout_);  // Combine's backward
  const Tensor din = backward_experts(dout);                // Expert
  const Tensor dsend = exchange_.combine(din, layout_);     // Dispatch's backward
  Tensor dx = order_rows_backward(plan_, dsend);            // Order
  dx.add(gate_->backward(g.grad_weight, aux_grad));         // Gate
  return dx;
}

std::vector<Param> MoeLayer::params() {
  std::vector<Param> all = gate_->params();
  for (int l = 0; l < local_experts(); ++l)
    for (Param p : experts_[static_cast<size_t>(l)]->params()) {
      p.name = "expert" + std::to_string(first_expert() + l) + "." + p.name;
      all.push_back(p);
    }
  return all;
}

void MoeLayer::zero_grad() {
  for (Param& p : params()) p.grad->fill(0.0f);
}

}  // namespace moecomm::nn

#include "nn/moe_layer.h"

#include <string>

#include "core/error.h"
#include "nn/exchange_chunks.h"
#include "nn/iorder.h"
#include "nn/order.h"

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

Tensor MoeLayer::forward_begin(const Tensor& x) {
  Tensor h = x;
  hooks_.run(HookPoint::kBeforeMoeStart, h);
  routing_ = gate_->forward(h);  // Gate
  if (routing_.experts != num_experts_)
    throw Error("moe layer", "gate routes to " + std::to_string(routing_.experts) +
                                 " experts, layer has " + std::to_string(num_experts_));
  plan_ = order_->plan(routing_);  // Order
  Tensor send = order_rows(plan_, h);
  hooks_.run(HookPoint::kBeforeDispatch, send);
  has_forward_ = false;
  return send;
}

void MoeLayer::set_layout(const ExchangeLayout& layout) {
  if (layout.experts() != num_experts_ || layout.local_experts != local_experts())
    throw Error("moe layer", "a layout of " + std::to_string(layout.experts()) + " experts (" +
                                 std::to_string(layout.local_experts) + " local) for a layer of " +
                                 std::to_string(num_experts_) + " (" +
                                 std::to_string(local_experts()) + " local)");
  layout_ = layout;
  caches_.assign(experts_.size(), ExpertCache{});
  inputs_.assign(experts_.size(), Tensor{});
}

Tensor MoeLayer::forward_experts(int i, int n, const Tensor& rows) {
  Tensor recv = rows;
  hooks_.run(HookPoint::kAfterDispatch, recv);
  Tensor out = run_expert_chunk(i, n, chunk_layout(layout_, i, n), recv);  // Expert
  hooks_.run(HookPoint::kBeforeCombine, out);
  return out;
}

Tensor MoeLayer::forward_end(const Tensor& combined) {
  combined_ = combined;
  hooks_.run(HookPoint::kAfterCombine, combined_);
  Tensor y = iorder(plan_, combined_);  // I-Order
  hooks_.run(HookPoint::kBeforeMoeEnd, y);
  has_forward_ = true;
  return y;
}

Tensor MoeLayer::forward(const Tensor& x) {
  const Tensor send = forward_begin(x);
  set_layout(exchange_.exchange_counts(plan_.counts));  // Dispatch
  const int n = chunks_fwd_;
  if (n == 1)
    return forward_end(
        exchange_.combine(forward_experts(0, 1, exchange_.dispatch(send, layout_)), layout_));
  // Dispatch, Expert and Combine per chunk
  return forward_end(
      exchange_.pipeline(send, layout_, n, [&](int i, const ExchangeLayout&, const Tensor& rows) {
        return forward_experts(i, n, rows);
      }));
}

Tensor MoeLayer::backward_begin(const Tensor& dy) {
  if (!has_forward_) throw Error("moe layer", "backward needs a forward first");
  IOrderGrad g = iorder_backward(plan_, combined_, dy);  // I-Order
  grad_weight_ = std::move(g.grad_weight);
  return std::move(g.dbuf);
}

Tensor MoeLayer::backward_experts(int i, int n, const Tensor& dout) {
  return backward_expert_chunk(i, n, chunk_layout(layout_, i, n), dout);
}

Tensor MoeLayer::backward_end(const Tensor& dsend, float aux_grad) {
  Tensor dx = order_rows_backward(plan_, dsend);    // Order
  dx.add(gate_->backward(grad_weight_, aux_grad));  // Gate
  return dx;
}

Tensor MoeLayer::backward(const Tensor& dy, float aux_grad) {
  const Tensor dbuf = backward_begin(dy);
  const int n = chunks_bwd_;
  if (n == 1)  // Combine's backward, Expert, Dispatch's backward
    return backward_end(
        exchange_.combine(backward_experts(0, 1, exchange_.dispatch(dbuf, layout_)), layout_),
        aux_grad);
  return backward_end(exchange_.pipeline(dbuf, layout_, n,
                                         [&](int i, const ExchangeLayout&, const Tensor& dout) {
                                           return backward_experts(i, n, dout);
                                         }),
                      aux_grad);
}

Tensor MoeLayer::forward_end_at_experts(const Tensor& y) {
  if (y.rows() != static_cast<int64_t>(plan_.tokens))
    throw Error("moe layer", "the combine returned " + std::to_string(y.rows()) + " rows for " +
                                 std::to_string(plan_.tokens) + " tokens");
  Tensor out = y;
  hooks_.run(HookPoint::kBeforeMoeEnd, out);
  combined_ = Tensor{};
  has_forward_ = true;
  return out;
}

Tensor MoeLayer::backward_begin_at_experts(const Tensor& dy) {
  if (!has_forward_) throw Error("moe layer", "backward needs a forward first");
  return order_rows(plan_, dy);  // every row its token's dy (padding rows: zeros)
}

Tensor MoeLayer::backward_end_at_experts(const Tensor& dx_tokens,
                                         const std::vector<float>& grad_row_weight,
                                         float aux_grad) {
  if (grad_row_weight.size() != static_cast<size_t>(plan_.rows()))
    throw Error("moe layer", std::to_string(grad_row_weight.size()) + " weight gradients for " +
                                 std::to_string(plan_.rows()) + " rows");
  // I-Order's weight gradient, as iorder_backward lays it out: by gate slot.
  grad_weight_.assign(static_cast<size_t>(plan_.slots), 0.0f);
  for (int r = 0; r < plan_.rows(); ++r)
    if (plan_.row_token[static_cast<size_t>(r)] >= 0)
      grad_weight_[static_cast<size_t>(plan_.row_slot[static_cast<size_t>(r)])] =
          grad_row_weight[static_cast<size_t>(r)];
  Tensor dx = dx_tokens;
  dx.add(gate_->backward(grad_weight_, aux_grad));  // Gate
  return dx;
}

void MoeLayer::set_chunks(int forward, int backward) {
  if (forward < 1 || backward < 1)
    throw Error("moe layer", "chunks must be >= 1, got forward " + std::to_string(forward) +
                                 ", backward " + std::to_string(backward));
  chunks_fwd_ = forward;
  chunks_bwd_ = backward;
}

std::vector<int> MoeLayer::expert_chunk_rows(int l, int i, int n,
                                             const ExchangeLayout& chunk) const {
  const std::vector<int> all = recv_chunk_rows(layout_, i, n);
  const int first = chunk.local_offset(l), base = layout_.local_offset(l);
  std::vector<int> rows(static_cast<size_t>(chunk.local_rows(l)));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = all[static_cast<size_t>(first) + r] - base;
  return rows;
}

// The chunk's activations go into caches_ at their full-layout rows, so the backward may use
// another pipeline degree than the forward (every saved tensor is row-aligned with the
// expert's input rows).
Tensor MoeLayer::expert_forward(int l, int i, int n, const ExchangeLayout& chunk, const Tensor& x) {
  ExpertCache part;
  Tensor y = experts_[static_cast<size_t>(l)]->forward(x, part);
  ExpertCache& full = caches_[static_cast<size_t>(l)];
  const std::vector<int> index = expert_chunk_rows(l, i, n, chunk);
  if (full.saved.empty())
    for (const Tensor& t : part.saved)
      full.saved.emplace_back(std::vector<int64_t>{layout_.local_rows(l), t.cols()});
  for (size_t k = 0; k < part.saved.size(); ++k) scatter_rows(full.saved[k], part.saved[k], index);
  return y;
}

// With recompute_experts only the input rows stay, at their full-layout rows; the
// activations go as soon as the chunk's outputs are out.
Tensor MoeLayer::run_expert_chunk(int i, int n, const ExchangeLayout& chunk, const Tensor& rows) {
  Tensor out(rows.shape());
  forward_chunks_ = n;
  for (int l = 0; l < local_experts(); ++l) {
    const int count = chunk.local_rows(l), at = chunk.local_offset(l);
    if (count == 0) continue;
    const Tensor x = rows.slice_rows(at, count);
    if (!recompute_experts_) {
      out.set_rows(at, expert_forward(l, i, n, chunk, x));
      continue;
    }
    ExpertCache dropped;
    out.set_rows(at, experts_[static_cast<size_t>(l)]->forward(x, dropped));
    Tensor& in = inputs_[static_cast<size_t>(l)];
    if (in.size() == 0) in = Tensor({layout_.local_rows(l), rows.cols()});
    scatter_rows(in, x, expert_chunk_rows(l, i, n, chunk));
  }
  return out;
}

// The forward again, on the very row blocks the forward ran: the same GEMM shapes, so the
// same bits whatever the backward's pipeline degree.
void MoeLayer::recompute_expert(int l) {
  const int n = forward_chunks_;
  for (int i = 0; i < n; ++i) {
    const ExchangeLayout chunk = chunk_layout(layout_, i, n);
    if (chunk.local_rows(l) == 0) continue;
    expert_forward(l, i, n, chunk,
                   gather_rows(inputs_[static_cast<size_t>(l)], expert_chunk_rows(l, i, n, chunk)));
  }
}

Tensor MoeLayer::backward_expert_chunk(int i, int n, const ExchangeLayout& chunk,
                                       const Tensor& dout) {
  Tensor din(dout.shape());
  for (int l = 0; l < local_experts(); ++l) {
    const int count = chunk.local_rows(l), at = chunk.local_offset(l);
    if (count == 0) continue;
    const std::vector<int> index = expert_chunk_rows(l, i, n, chunk);
    Expert& expert = *experts_[static_cast<size_t>(l)];
    ExpertCache part;
    if (recompute_experts_ && n == forward_chunks_) {
      // The backward's chunk is the forward's: its activations alone, recomputed.
      expert.forward(gather_rows(inputs_[static_cast<size_t>(l)], index), part);
    } else {
      // Other chunks than the forward's: every forward chunk recomputed once, then kept
      // until the layer's backward is done with them.
      if (recompute_experts_ && caches_[static_cast<size_t>(l)].saved.empty()) recompute_expert(l);
      for (const Tensor& t : caches_[static_cast<size_t>(l)].saved)
        part.saved.push_back(gather_rows(t, index));
    }
    din.set_rows(at, expert.backward(dout.slice_rows(at, count), part));
  }
  return din;
}

int64_t MoeLayer::saved_floats() const {
  int64_t floats = 0;
  for (const ExpertCache& cache : caches_)
    for (const Tensor& t : cache.saved) floats += t.size();
  for (const Tensor& t : inputs_) floats += t.size();
  return floats;
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

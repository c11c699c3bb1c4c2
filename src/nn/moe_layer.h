#pragma once
// The MoE layer of FSMoE's modules (Sec. 3.1): Gate -> Order -> Dispatch -> Expert ->
// Combine -> I-Order, with the six hooks (moe_hooks.h), forward and backward.
//
//   forward(x [T, M]) -> y [T, M]:
//     y[t] = sum over kept slots s of token t of weight_s * Expert_{e_s}(x[t])
//   backward(dy [T, M], aux_grad) -> dx [T, M], for the loss L(y) + aux_grad * aux_loss():
//     accumulates (+=) the gradients of the gate's and this rank's experts' parameters.
//
// The math does not depend on where experts live: a layer on EP ranks (each holding the
// experts [rank L, (rank + 1) L), L = E / EP, exchanged through a TokenExchange) gives on each
// rank the outputs and input gradients of a single-process layer (LocalExchange, all experts,
// same weights) run on that rank's tokens; expert weight gradients are the sum over ranks of
// the single-process ones. Routing, capacity and the aux loss are per rank (on its tokens).
#include <memory>
#include <vector>

#include "nn/expert.h"
#include "nn/gate.h"
#include "nn/moe_hooks.h"
#include "nn/order.h"
#include "nn/token_exchange.h"

namespace moecomm::nn {

class MoeLayer {
 public:
  // experts: the L = num_experts / exchange.ranks() local experts, in global order.
  // The exchange must outlive the layer.
  MoeLayer(std::unique_ptr<Gate> gate, std::unique_ptr<Order> order,
           std::vector<std::unique_ptr<Expert>> experts, int num_experts, TokenExchange& exchange);

  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& dy, float aux_grad);

  // The stages forward() and backward() run, for an executor that runs Dispatch and Combine
  // itself as ops of a schedule (rt/model_binding.h). Forward: forward_begin, then (once the
  // counts are exchanged) set_layout, then per chunk i of n forward_experts on chunk i's
  // dispatched rows (local-expert-major in chunk_layout(layout(), i, n)), then forward_end on
  // the combined rows (the send layout). Backward: backward_begin, backward_experts per
  // chunk (any n), backward_end. Hooks run where forward() runs them.
  Tensor forward_begin(const Tensor& x);  // Gate and Order: the rows to send, plan().counts
  void set_layout(const ExchangeLayout& layout);
  Tensor forward_experts(int i, int n, const Tensor& rows);
  Tensor forward_end(const Tensor& combined);  // I-Order: the layer's output
  Tensor backward_begin(const Tensor& dy);     // I-Order's backward: the rows' gradient
  Tensor backward_experts(int i, int n, const Tensor& dout);
  Tensor backward_end(const Tensor& dsend, float aux_grad);  // Order's and Gate's: dx

  // The same with the combine weights applied at the experts (a2a=dedup: the combine sums a
  // token's outputs on their way back, DeepEP's layout). The experts' side multiplies each
  // output row by its weight (plan().row_weight, sent with the rows); the combine returns one
  // row per token, y. Backward: backward_begin_at_experts gives each row its token's dy
  // (the weights are applied at the experts again: dout = weight * dy, and the weight's
  // gradient <output, dy> comes back per row); backward_end_at_experts takes the rows'
  // gradients summed per token and those per-row weight gradients (in the send layout). No
  // per-row combined buffer exists here, so the after-combine hook does not run; the others do.
  Tensor forward_end_at_experts(const Tensor& y);
  Tensor backward_begin_at_experts(const Tensor& dy);
  Tensor backward_end_at_experts(const Tensor& dx_tokens, const std::vector<float>& grad_row_weight,
                                 float aux_grad);

  // Pipeline degrees of the token path (FSMoE's r, forward and backward chosen separately;
  // Lina's A2A/FFN micro-ops): with n > 1 the rows go through TokenExchange::pipeline in n
  // chunks and the experts run chunk by chunk; the after-dispatch and before-combine hooks
  // then see one chunk at a time. 1 (the default): one dispatch, experts, one combine.
  void set_chunks(int forward, int backward);
  // Activation recomputation of the experts (sched::Strategy::recompute_experts): forward keeps
  // only each expert's input rows, and backward runs the expert forward again on them before
  // its backward. Outputs and gradients are bit for bit those of a layer that keeps the
  // activations: the recomputation runs on the forward's own row blocks (its chunks).
  void set_recompute_experts(bool on) { recompute_experts_ = on; }
  bool recompute_experts() const { return recompute_experts_; }
  // Floats the experts hold for the backward once the forward is done: their saved activations,
  // or under recompute_experts their input rows alone.
  int64_t saved_floats() const;

  MoeHooks& hooks() { return hooks_; }
  float aux_loss() const { return routing_.aux_loss; }
  const GateOutput& routing() const { return routing_; }
  const OrderPlan& plan() const { return plan_; }
  const ExchangeLayout& layout() const { return layout_; }
  int num_experts() const { return num_experts_; }
  int first_expert() const;  // global index of local expert 0
  Gate& gate() { return *gate_; }
  Expert& expert(int local) { return *experts_.at(static_cast<size_t>(local)); }
  int local_experts() const { return static_cast<int>(experts_.size()); }

  // "gate.<name>" and "expert<global e>.<name>".
  std::vector<Param> params();
  void zero_grad();

 private:
  // One chunk of n (exchange_chunks.h): its rows' experts, forward (saving their activations
  // into the full-layout caches) and backward (reading them back).
  Tensor run_expert_chunk(int i, int n, const ExchangeLayout& chunk, const Tensor& rows);
  Tensor backward_expert_chunk(int i, int n, const ExchangeLayout& chunk, const Tensor& dout);
  // Chunk i's rows of local expert l, as rows of l's block in the full dispatched buffer.
  std::vector<int> expert_chunk_rows(int l, int i, int n, const ExchangeLayout& chunk) const;
  // Local expert l's forward on chunk i of n's rows `x`, its activations into caches_[l].
  Tensor expert_forward(int l, int i, int n, const ExchangeLayout& chunk, const Tensor& x);
  // recompute_experts: caches_[l] rebuilt from inputs_[l], chunk by forward chunk.
  void recompute_expert(int l);

  std::unique_ptr<Gate> gate_;
  std::unique_ptr<Order> order_;
  std::vector<std::unique_ptr<Expert>> experts_;
  int num_experts_;
  TokenExchange& exchange_;
  MoeHooks hooks_;
  // Saved by forward.
  GateOutput routing_;
  OrderPlan plan_;
  ExchangeLayout layout_;
  std::vector<ExpertCache> caches_;
  // recompute_experts: per local expert, its input rows (full layout), and the forward's
  // pipeline degree, whose chunks the recomputation repeats.
  std::vector<Tensor> inputs_;
  int forward_chunks_ = 1;
  bool recompute_experts_ = false;
  Tensor combined_;                 // after the after-combine hook: I-Order's input
  std::vector<float> grad_weight_;  // backward_begin's gradient of the combine weights
  bool has_forward_ = false;
  int chunks_fwd_ = 1, chunks_bwd_ = 1;
};

}  // namespace moecomm::nn

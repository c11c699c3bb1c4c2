#include "rt/train_exchange.h"

#include <stdexcept>

#include <utility>

#include "core/error.h"
#include "rt/collectives.h"

namespace moecomm::rt {
namespace {

// Pairs begin(phase) with end(phase) also when the A2A throws.
class Active {
 public:
  Active(A2AActivity& a, A2APhase phase) : a_(&a), phase_(phase) { a.begin(phase); }
  ~Active() {
    if (a_) a_->end(phase_);
  }
  Active(const Active&) = delete;
  Active& operator=(const Active&) = delete;
  // Begins `next`, then ends this phase: no instant without a pending A2A, so no gradient
  // micro-op slips in between (the pipeline's communication thread is not gated itself).
  void switch_to(A2APhase next) {
    a_->begin(next);
    a_->end(std::exchange(phase_, next));
  }

 private:
  A2AActivity* a_;
  A2APhase phase_;
};

}  // namespace

nn::ExchangeLayout ActivityExchange::exchange_counts(const std::vector<int>& send_counts) {
  Active a(activity_, A2APhase::kDispatch);
  nn::ExchangeLayout layout = inner_.exchange_counts(send_counts);
  expert_rows_.resize(send_counts.size(), 0);
  for (size_t e = 0; e < send_counts.size(); ++e) expert_rows_[e] += send_counts[e];
  ++dispatches_;
  return layout;
}

nn::Tensor ActivityExchange::dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) {
  Active a(activity_, A2APhase::kDispatch);
  return inner_.dispatch(send, layout);
}

nn::Tensor ActivityExchange::combine(const nn::Tensor& expert_rows,
                                     const nn::ExchangeLayout& layout) {
  Active a(activity_, A2APhase::kCombine);
  return inner_.combine(expert_rows, layout);
}

nn::Tensor ActivityExchange::pipeline(const nn::Tensor& send, const nn::ExchangeLayout& layout,
                                      int chunks, const ChunkExperts& experts) {
  Active a(activity_, A2APhase::kDispatch);
  return inner_.pipeline(send, layout, chunks,
                         [&](int i, const nn::ExchangeLayout& chunk, const nn::Tensor& rows) {
                           if (i == chunks - 1) a.switch_to(A2APhase::kCombine);
                           return experts(i, chunk, rows);
                         });
}

TokenPath::TokenPath(const TrainGroups& g, const CommPool& comms, const TokenPathOptions& o,
                     A2AActivity& activity) {
  const sched::Strategy& s = o.strategy;
  if (g.parallel.tp > 1 || (!s.pipeline_experts && (s.chunks_fwd > 1 || s.chunks_bwd > 1)))
    throw std::logic_error("the hand-built token path runs tp=1 with pipelined chunks only");
  const Comm& ep = comms.at({o.token_group.empty() ? g.ep : o.token_group, 0});
  mpi_ = std::make_unique<MpiTokenExchange>(ep, o.call, s.a2a, o.bf16);
  tracked_ = std::make_unique<ActivityExchange>(*mpi_, activity);
}

LinkBytes TokenPath::bytes() const {
  return mpi_->bytes();
}

void TokenPath::reset_bytes() {
  mpi_->reset_bytes();
}

}  // namespace moecomm::rt

#pragma once
// nn::TokenExchange over MPI (the runtime's Dispatch and Combine, FSMoE Sec. 3.1): the
// counts, then the rows, by A2A-v over the EP group's communicator, flat or hierarchical.
// Keeps the A2A bytes it sent by link level. Chunks (TokenExchange::pipeline) run one after
// another; `moecomm train` runs the MoE layers' exchanges as schedule ops instead
// (model_binding.h).
#include "nn/token_exchange.h"
#include "rt/comm.h"
#include "rt/link_bytes.h"
#include "rt/wait.h"
#include "sched/op.h"

namespace moecomm::rt {

class MpiTokenExchange final : public nn::TokenExchange {
 public:
  // options.ranks_per_node sets the link levels; options.bytes is replaced by this
  // exchange's own counter.
  // bf16: rows travel as bfloat16 (half the bytes), rounded to nearest even; compute stays
  // fp32.
  MpiTokenExchange(const Comm& ep, CallOptions options,
                   sched::Algorithm algorithm = sched::Algorithm::kFlat, bool bf16 = false);

  int ranks() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  nn::ExchangeLayout exchange_counts(const std::vector<int>& send_counts) override;
  nn::Tensor dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) override;
  nn::Tensor combine(const nn::Tensor& expert_rows, const nn::ExchangeLayout& layout) override;

  const LinkBytes& bytes() const { return bytes_; }  // rows this rank sent, by link level
  void reset_bytes() { bytes_ = {}; }

 private:
  // A2A-v of fp32 rows: rows[j] rows of `cols` floats to member j, recv_rows[i] from member i
  // (known from the layout: no counts exchange).
  nn::Tensor exchange_rows(const nn::Tensor& send, const std::vector<int64_t>& rows,
                           const std::vector<int64_t>& recv_rows, std::string_view label);

  const Comm& ep_;
  CallOptions options_;
  sched::Algorithm algorithm_;
  bool bf16_;
  LinkBytes bytes_;
};

}  // namespace moecomm::rt

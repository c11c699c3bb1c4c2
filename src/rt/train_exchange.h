#pragma once
// The token path `moecomm train` runs for a Strategy (sched/strategy.h): which TokenExchange
// carries the MoE layers' tokens, and the A2A activity record the gradient scheduler reads.
//   * tp = 1, replicate dispatch, no communication-only chunks: MpiTokenExchange (flat, 1DH,
//     2DH A2A; optional bf16 rows).
//   * otherwise TpTokenExchange: DeepSpeed's replicate or MoNTA's Drop + A2A + AllGather,
//     with N chunks (O2) and copy pipelining (O3) when the experts do not pipeline.
// FSMoE's and Lina's expert pipelining is the MoE layer's chunks (MoeLayer::set_chunks), run
// through the exchange's pipeline().
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/tensor_parallel.h"
#include "nn/token_exchange.h"
#include "rt/a2a_activity.h"
#include "rt/comm_pool.h"
#include "rt/link_bytes.h"
#include "rt/mpi_token_exchange.h"
#include "rt/tp_token_exchange.h"
#include "rt/train_groups.h"
#include "sched/strategy.h"

namespace moecomm::rt {

// Tells `activity` when the inner exchange's A2As are pending and done (Lina's gate, FSMoE's
// windows). A pipelined chunk sequence counts as one dispatch until the last chunk's experts
// start (every dispatch A2A is done then: FSMoE's window opens) and as one combine after.
class ActivityExchange final : public nn::TokenExchange {
 public:
  ActivityExchange(nn::TokenExchange& inner, A2AActivity& activity)
      : inner_(inner), activity_(activity) {}
  int ranks() const override { return inner_.ranks(); }
  int rank() const override { return inner_.rank(); }
  nn::ExchangeLayout exchange_counts(const std::vector<int>& send_counts) override;
  nn::Tensor dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) override;
  nn::Tensor combine(const nn::Tensor& expert_rows, const nn::ExchangeLayout& layout) override;
  nn::Tensor pipeline(const nn::Tensor& send, const nn::ExchangeLayout& layout, int chunks,
                      const ChunkExperts& experts) override;
  // Rows this rank's dispatches sent to each global expert so far (the layer's counts,
  // before any TP drop or HybridEP's local computation: the plain EP dispatch the simulator
  // takes), and how many dispatches.
  const std::vector<int64_t>& expert_rows() const { return expert_rows_; }
  int64_t dispatches() const { return dispatches_; }

 private:
  nn::TokenExchange& inner_;
  A2AActivity& activity_;
  std::vector<int64_t> expert_rows_;
  int64_t dispatches_ = 0;
};

// Megatron's attention AllReduces over the TP group (nn/tensor_parallel.h), counting the
// bytes this rank sends by link level.
class MpiTensorParallel final : public nn::TensorParallelGroup {
 public:
  MpiTensorParallel(const Comm& tp, CallOptions call) : tp_(tp), call_(std::move(call)) {
    call_.label = "attn.tp.allreduce";
    call_.bytes = &bytes_;
  }
  void all_reduce_sum(nn::Tensor& t) override;
  const LinkBytes& bytes() const { return bytes_; }
  void reset_bytes() { bytes_ = {}; }

 private:
  const Comm& tp_;
  CallOptions call_;
  LinkBytes bytes_;
};

struct TokenPathOptions {
  sched::Strategy strategy;
  bool bf16 = false;
  CallOptions call;  // timeout and ranks per node
  // The group the token A2A runs over; empty: the EP group. HybridEP: the members at this
  // rank's offset in every expert domain (rt/hybrid_experts.h).
  core::RankGroup token_group;
};

class TokenPath {
 public:
  // `comms` must hold channel 0 of the EP and TP groups of `groups`. Throws moecomm::Error
  // naming the knob when the combination cannot run (e.g. bf16 rows under tensor parallelism).
  TokenPath(const TrainGroups& groups, const CommPool& comms, const TokenPathOptions& options,
            A2AActivity& activity);

  nn::TokenExchange& exchange() { return *tracked_; }
  // Bytes this rank sent on the token path (A2A, and the ESP/TP collectives), by link level.
  LinkBytes bytes() const;
  void reset_bytes();
  const ActivityExchange& tracked() const { return *tracked_; }

 private:
  std::unique_ptr<MpiTokenExchange> mpi_;
  std::unique_ptr<TpTokenExchange> tp_;
  std::unique_ptr<ActivityExchange> tracked_;
};

}  // namespace moecomm::rt

#pragma once
// The hand-built runtime's token path (train_loop.h; placement=netmoe and bf16 rows run there
// until the schedule runtime runs them): MpiTokenExchange (flat, 1DH, 2DH A2A; optional bf16
// rows) at tp = 1, and the A2A activity record the gradient scheduler reads. FSMoE's and
// Lina's expert pipelining is the MoE layer's chunks (MoeLayer::set_chunks), run through the
// exchange's pipeline(). Tensor parallelism and MoNTA's token paths run on the schedule
// runtime (scheduled_train.h).
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/token_exchange.h"
#include "rt/a2a_activity.h"
#include "rt/comm_pool.h"
#include "rt/link_bytes.h"
#include "rt/mpi_token_exchange.h"
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
  // `comms` must hold channel 0 of the EP group of `groups` (or options.token_group).
  TokenPath(const TrainGroups& groups, const CommPool& comms, const TokenPathOptions& options,
            A2AActivity& activity);

  nn::TokenExchange& exchange() { return *tracked_; }
  // Bytes this rank sent on the token path's A2As, by link level.
  LinkBytes bytes() const;
  void reset_bytes();
  const ActivityExchange& tracked() const { return *tracked_; }

 private:
  std::unique_ptr<MpiTokenExchange> mpi_;
  std::unique_ptr<ActivityExchange> tracked_;
};

}  // namespace moecomm::rt

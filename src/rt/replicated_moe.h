#pragma once
// Lina's popularity-aware MoE inference at run time (lina.txt Sec. 5.2, 6.2): an inference
// MoE layer over the EP group whose experts are replicated and packed per a plan
// (replicated_plan.h), forward only.
//
//   Gate -> Order (as the baseline nn::MoeLayer, same gate and order from the spec, so the
//   routing is the baseline's) -> split: source rank s cuts its rows of expert e into
//   contiguous, even pieces, one per replica of e (split_rows) -> metadata A2A -> rows A2A-v
//   (unequal splits) -> each resident expert runs once on all its rows (packed experts one
//   after another, Sec. 6.2 "Expert packing") -> rows A2A-v back -> I-Order.
//
// Metadata piggyback (Sec. 6.2: "all relevant communication happens by piggybacking the
// information on the regular all-to-all"): the layer's first A2A, the one that carries the
// per-destination counts, carries for each destination [plan fingerprint, (expert, rows) for
// every non-empty block sent there, ascending expert]. A receiver learns from it alone which
// resident expert each block of the rows A2A is for and how many rows it has, and every rank
// checks that all ranks run the same plan. The plan itself is given on every rank (as
// Lina's scheduler delivers the mapping through the previous layer's A2A).
//
// Outputs equal the baseline layer's (plain EP over MpiTokenExchange, same spec) for every
// valid plan: each row meets the same expert weights, only on another rank.
#include <memory>
#include <vector>

#include "nn/gate.h"
#include "nn/moe_layer_factory.h"
#include "nn/order.h"
#include "rt/comm.h"
#include "rt/link_bytes.h"
#include "rt/replicated_experts.h"
#include "rt/replicated_plan.h"
#include "rt/wait.h"
#include "sched/op.h"

namespace moecomm::rt {

class ReplicatedMoeLayer {
 public:
  // spec as for nn::make_moe_layer (no expert sharding); options.bytes is replaced by this
  // layer's counters. Every rank keeps all spec.experts experts in its host store and at most
  // max_experts_per_device resident. `ep` must outlive the layer.
  ReplicatedMoeLayer(const nn::MoeLayerSpec& spec, const Comm& ep, CallOptions options,
                     int max_experts_per_device,
                     sched::Algorithm algorithm = sched::Algorithm::kFlat);

  // Validates the plan (moecomm::Error) and swaps in this rank's experts; no communication.
  // Every rank must set the same plan before the next forward (forward checks it).
  void set_plan(ReplicaPlan plan);
  // x [T, M] -> y [T, M]; collective over the EP group. Needs a plan.
  nn::Tensor forward(const nn::Tensor& x);

  // Given routing (`moecomm infer` replays a trace's routing through the layer): forward
  // from the Order module on, with `routing` in place of the gate's output. routing must be
  // a token-choice GateOutput over x's rows and this layer's experts (moecomm::Error if not).
  nn::Tensor forward_routed(const nn::Tensor& x, const nn::GateOutput& routing);

  const ReplicaPlan& plan() const { return plan_; }
  const std::vector<int>& resident_experts() const { return resident_; }  // ascending
  int64_t swaps() const { return swapper_.swaps(); }
  int64_t swapped_bytes() const { return swapper_.swapped_bytes(); }
  int experts() const { return experts_; }

  // Bytes this rank sent by link level: rows (dispatch and combine), metadata A2A.
  const LinkBytes& bytes() const { return bytes_; }
  const LinkBytes& meta_bytes() const { return meta_bytes_; }
  void reset_bytes() { bytes_ = meta_bytes_ = {}; }

  // The last forward: its routing and order, and the rows this rank received for expert e
  // from source rank s at [s * E + e].
  const nn::GateOutput& routing() const { return routing_; }
  const nn::OrderPlan& order_plan() const { return order_plan_; }
  const std::vector<int>& received() const { return received_; }

 private:
  struct Block {  // rows [first, first + rows) of a buffer, for `expert`, to/from `rank`
    int rank = 0, expert = 0, first = 0, rows = 0;
  };
  std::vector<Block> send_blocks() const;  // destination-major, ascending expert
  std::vector<Block> exchange_metadata(const std::vector<Block>& send);  // -> source-major
  nn::Tensor exchange_rows(const nn::Tensor& rows, const std::vector<int64_t>& per_rank,
                           const char* label);
  nn::Tensor run_experts(const nn::Tensor& recv, const std::vector<Block>& blocks) const;
  CallOptions call(const char* label, LinkBytes* bytes) const;
  nn::Tensor forward_ordered(const nn::Tensor& x);  // Order .. I-Order on routing_

  std::unique_ptr<nn::Gate> gate_;
  std::unique_ptr<nn::Order> order_;
  const Comm& ep_;
  CallOptions options_;
  sched::Algorithm algorithm_;
  int experts_, max_per_device_;
  ExpertSwapper swapper_;
  ReplicaPlan plan_;
  std::vector<int> resident_;
  int fingerprint_ = -1;
  LinkBytes bytes_, meta_bytes_;
  nn::GateOutput routing_;
  nn::OrderPlan order_plan_;
  std::vector<int> received_;
};

}  // namespace moecomm::rt

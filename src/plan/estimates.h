#pragma once
// One estimate function per strategy of the plan table; each follows its paper's model and
// adds the terms its paper leaves out from the shared context, so the rows compare.
#include <optional>
#include <string>

#include "core/topology.h"
#include "cost/collective_model.h"
#include "cost/gemm_model.h"
#include "plan/moe_workload.h"
#include "plan/strategy_table.h"

namespace moecomm::plan {

// HybridEP's SR compression ratio the plan tries beside no compression (HybridEP Sec. V-E).
inline constexpr double kHybridEpCompression = 50.0;

struct EstimateContext {
  const PlanInput& input;
  const core::Topology& topology;
  const MoeWorkload& work;
  const cost::CollectiveModel& comm;
  cost::GemmModel gemm;               // one GEMM: start-up and seconds per flop
  cost::AlphaBeta expert_line;        // all expert GEMMs of one rank (FSMoE Eq. 1's t_exp)
  double expert_fwd_s = 0;            // expert FFN forward on one rank
  double esp_reduce_s = 0;            // summing the expert shards' partial outputs over ESP
  double flat_a2a_s = 0;              // one flat A2A of the dispatch buffer over the EP group
  double pre_expert_fwd_s = 0;        // attention (and gate) forward before the experts
  double base_memory_bytes = 0;       // MoNTA Eq. 1 per device
  double state_bytes_per_expert = 0;  // model state of one more expert shard on a device
};

// One EP layer with A2As of a2a_s each and no other change: forward A2A, experts, (ESP
// reduce), A2A; backward the same around twice the expert work, with the layer's gradients
// in one bucket that fair-shares the links (backward_with_bucketed_sync).
double ep_forward(const EstimateContext& ctx, double a2a_s);
double ep_backward(const EstimateContext& ctx, double a2a_s);

// Baseline EP (flat A2A, replicated dispatch under expert sharding) and 2DH hierarchical A2A.
StrategyEstimate estimate_baseline(const EstimateContext& ctx);
StrategyEstimate estimate_hierarchical(const EstimateContext& ctx);
// MoNTA O1/O2/O3 (level = 1, 2, 3); nullopt with `why` set when the model does not apply.
std::optional<StrategyEstimate> estimate_monta(const EstimateContext& ctx, int level,
                                               std::string& why);
std::optional<StrategyEstimate> estimate_fsmoe(const EstimateContext& ctx, std::string& why);
// HybridEP with its experts compressed sr times (SR, Sec. III-D; 1: uncompressed).
std::optional<StrategyEstimate> estimate_hybridep(const EstimateContext& ctx, double sr,
                                                  std::string& why);
std::optional<StrategyEstimate> estimate_lina(const EstimateContext& ctx, std::string& why);
// Backward of a layer whose gradient AllReduce fair-shares the links with its A2As:
// two A2As around ffn_s of expert backward, until the layer's gradients are synchronized.
double backward_with_bucketed_sync(const EstimateContext& ctx, double a2a_s, double ffn_s);

// The per-level worker counts an EP group spans (core/topology.h).
using core::group_span;
using core::GroupSpan;

}  // namespace moecomm::plan

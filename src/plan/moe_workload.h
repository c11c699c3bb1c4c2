#pragma once
// What one MoE layer of a model asks of the cluster under a parallel configuration: the
// bytes each A2A sends per rank, how they split over the levels, the expert flops and the
// gradient bytes to synchronize. Shared by every strategy's estimate in the plan table.
#include <optional>
#include <vector>

#include "core/rank_groups.h"
#include "core/topology.h"
#include "cost/collective_model.h"
#include "plan/strategy_table.h"

namespace moecomm::plan {

struct MoeWorkload {
  double tokens = 0;  // tokens of one micro-batch on one rank (b s / cp; a TP group shares them)
  double routed_tokens = 0;  // tokens x top_k x capacity factor: rows of the dispatch buffer
  double a2a_bytes = 0;      // bytes one rank sends in one A2A (dispatch = combine), replicated TP
  double token_bytes = 0;    // h x dtype bytes: one token row
  double expert_flops = 0;   // forward expert flops on one rank (its 1/esp shard)
  double dense_grad_bytes =
      0;  // gradients of one layer's dense part on one rank (AllReduce over dp x cp)
  double expert_grad_bytes = 0;  // gradients of one rank's expert shards (AllReduce over edp)
  double experts_per_rank = 0;   // experts / ep
  std::vector<double> a2a_level_share;  // share of A2A bytes per level (EP group of rank 0)
  int inter_level = 0;  // the outermost level the EP group crosses (its A2A bottleneck)
  core::RankGroups groups;
};

MoeWorkload derive_workload(const PlanInput& input, const cost::CollectiveModel& comm);

// The parallel sizes of `input` with the EP size `ep`, edp re-derived (Lina's expert packing:
// fewer EP ranks, more experts on each, a larger EDP group); nullopt when they do not fold the
// world or split the experts.
std::optional<core::ParallelConfig> with_ep(const PlanInput& input, int ep);

}  // namespace moecomm::plan

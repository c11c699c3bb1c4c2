#pragma once
// What one MoE layer of a model asks of the cluster under a parallel configuration, as the
// plan's estimates see it: the schedule's per-rank workload (sched::layer_workload, the one
// computation of tokens, A2A bytes, flops and gradient bytes) plus where the groups sit on
// the topology. Shared by every strategy's estimate in the plan table.
#include <optional>
#include <vector>

#include "core/rank_groups.h"
#include "core/topology.h"
#include "cost/collective_model.h"
#include "plan/strategy_table.h"
#include "sched/layer_workload.h"

namespace moecomm::plan {

struct MoeWorkload : sched::LayerWorkload {
  double experts_per_rank = 0;          // experts / ep
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

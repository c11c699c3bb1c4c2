#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "plan/estimates.h"

namespace moecomm::plan {

double ep_forward(const EstimateContext& ctx, double a2a_s) {
  return 2 * a2a_s + ctx.expert_fwd_s + ctx.esp_reduce_s;
}

double ep_backward(const EstimateContext& ctx, double a2a_s) {
  return backward_with_bucketed_sync(ctx, a2a_s, 2 * ctx.expert_fwd_s) + ctx.esp_reduce_s;
}

StrategyEstimate estimate_baseline(const EstimateContext& ctx) {
  // Every ESP rank dispatches the whole replicated batch (DeepSpeed's TP dispatch).
  StrategyEstimate e;
  e.name = "baseline";
  e.source = "flat A2A over the EP group (alpha-beta per level with efficiency curves)";
  e.forward_s = ep_forward(ctx, ctx.flat_a2a_s);
  e.backward_s = ep_backward(ctx, ctx.flat_a2a_s);
  e.memory_bytes = ctx.base_memory_bytes;
  e.knobs.name = e.name;
  e.a2a_s = ctx.flat_a2a_s;
  return e;
}

// Tutel's 2DH A2A, split as the schedule runs it (sim::collective_phases, rt's
// members_by_node): the EP members of each node (the innermost level's worker) first regroup
// their data by destination node in an intra-node A2A, then member l of every node sends one
// aggregated message to member l of every other node (q - 1 start-ups instead of one per
// remote peer). Both phases run one after the other. An EP group inside one node, or with
// unequal members per node, runs the flat A2A, as the schedule does.
StrategyEstimate estimate_hierarchical(const EstimateContext& ctx) {
  const auto& w = ctx.work;
  const auto& group = w.groups.ep.front();
  const core::Topology& topo = ctx.topology;
  const int devices_per_node = topo.level(topo.num_levels() - 1).count;
  std::map<int, std::vector<int>> by_node;  // the EP members on each node, by node
  for (int r : group) by_node[r / devices_per_node].push_back(r);
  const int nodes = static_cast<int>(by_node.size());
  const int local = static_cast<int>(by_node.begin()->second.size());
  const bool even = std::all_of(by_node.begin(), by_node.end(), [&](const auto& node) {
    return static_cast<int>(node.second.size()) == local;
  });
  StrategyEstimate e;
  e.name = "hier-a2a";
  e.knobs.name = e.name;
  e.knobs.a2a = sched::Algorithm::k2DH;
  double a2a = ctx.flat_a2a_s;
  const std::string group_size = std::to_string(group.size());
  if (nodes > 1 && even) {
    double intra = 0;
    if (local > 1)
      intra = ctx.comm.time(cost::Collective::kAllToAll,
                            ctx.comm.bottleneck_level(by_node.begin()->second), local, w.a2a_bytes);
    std::vector<int> across;  // member 0 of every node: one of the inter-node A2As
    for (const auto& [node, members] : by_node) across.push_back(members.front());
    a2a = intra + ctx.comm.time(cost::Collective::kAllToAll, ctx.comm.bottleneck_level(across),
                                nodes, w.a2a_bytes);
    e.hierarchical = HierarchicalSplit{nodes, local};
    const std::string n = std::to_string(nodes), l = std::to_string(local);
    e.source =
        "2DH hierarchical A2A (Tutel) over the EP group's " + group_size + " ranks, " + l +
        " on each of " + n + " nodes: " +
        (local > 1 ? "an intra-node A2A among each node's " + l + ", then " + l +
                         " inter-node A2As (one per rank of a node) among the " + n + " nodes"
                   : "no intra-node step, one inter-node A2A among the " + n + " nodes");
  } else if (nodes == 1) {
    e.hierarchical = HierarchicalSplit{1, local};
    e.source = "2DH hierarchical A2A (Tutel) over the EP group's " + group_size +
               " ranks: they share one node, so it runs as the flat A2A";
  } else {
    e.source = "2DH hierarchical A2A (Tutel) over the EP group's " + group_size +
               " ranks: " + std::to_string(nodes) +
               " nodes hold unequal numbers of them, so it runs as the flat A2A";
  }
  e.forward_s = ep_forward(ctx, a2a);
  e.backward_s = ep_backward(ctx, a2a);
  e.memory_bytes = ctx.base_memory_bytes;
  e.a2a_s = a2a;
  return e;
}

}  // namespace moecomm::plan

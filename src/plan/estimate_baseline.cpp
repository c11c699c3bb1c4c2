#include <cmath>
#include <set>

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

// Tutel's 2DH A2A: an intra-node A2A regroups the data by destination node, then one
// aggregated message per node pair crosses the slow link (q - 1 start-ups instead of one
// per remote peer). Both phases run one after the other.
StrategyEstimate estimate_hierarchical(const EstimateContext& ctx) {
  const auto& w = ctx.work;
  const auto& group = w.groups.ep.front();
  const int outer = w.inter_level;
  StrategyEstimate e;
  e.name = "hier-a2a";
  e.source = "2DH hierarchical A2A (Tutel; DESIGN.md a2a knob)";
  e.knobs.name = e.name;
  e.knobs.a2a = sched::Algorithm::k2DH;
  double a2a = ctx.flat_a2a_s;
  if (outer != core::Topology::kSameDevice) {
    std::vector<int> local;  // the EP members sharing group[0]'s worker at the outer level
    for (int r : group)
      if (r == group[0] || ctx.topology.meet_level(group[0], r) > outer) local.push_back(r);
    const int nodes = static_cast<int>(group.size() / local.size());
    double intra = 0;
    if (local.size() > 1)
      intra = ctx.comm.time(cost::Collective::kAllToAll, ctx.comm.bottleneck_level(local),
                            static_cast<int>(local.size()), w.a2a_bytes);
    a2a = intra + ctx.comm.time(cost::Collective::kAllToAll, outer, nodes, w.a2a_bytes);
    e.hierarchical = HierarchicalSplit{nodes, static_cast<int>(local.size())};
  }
  e.forward_s = ep_forward(ctx, a2a);
  e.backward_s = ep_backward(ctx, a2a);
  e.memory_bytes = ctx.base_memory_bytes;
  e.a2a_s = a2a;
  return e;
}

}  // namespace moecomm::plan

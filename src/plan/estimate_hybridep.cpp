// The HybridEP row: inside expert domains experts travel (AllGather, compressed), across
// them tokens (A2A); domain sizes per level from HybridEP's stream model (Sec. III, IV-A).
#include "plan/estimates.h"
#include "plan/hybridep_domains.h"
#include "plan/hybridep_planner.h"

namespace moecomm::plan {

std::optional<StrategyEstimate> estimate_hybridep(const EstimateContext& ctx, double compression,
                                                  std::string& why) {
  const auto& w = ctx.work;
  auto span = group_span(ctx.topology, w.groups.ep.front());
  if (!span || span->levels.empty()) {
    why = span ? "the EP group has one rank: nothing to move" : "the EP group is not a sub-grid of the levels";
    return std::nullopt;
  }
  HybridEpLayerInput in;
  for (size_t i = 0; i < span->levels.size(); ++i)
    in.levels.push_back({span->counts[i], ctx.topology.level(span->levels[i]).bandwidth});
  const double expert_bytes =
      w.experts_per_rank * ctx.input.model.expert_params() / ctx.input.parallel.esp * ctx.input.model.dtype_bytes;
  in.data_bytes = w.a2a_bytes;
  in.expert_bytes = expert_bytes / compression;
  const int n = std::max(1, static_cast<int>(w.experts_per_rank));
  in.compute = {ctx.pre_expert_fwd_s, ctx.expert_fwd_s, n};
  const HybridEpPlan plan = hybridep_plan(in);
  const HybridEpLayerTimes bwd = hybridep_backward_times(
      in, {expert_bytes, {2 * ctx.pre_expert_fwd_s, 2 * ctx.expert_fwd_s, n}}, plan.domain_sizes);
  StrategyEstimate e;
  e.name = compression > 1 ? "hybridep-sr" : "hybridep";
  e.source = "HybridEP Eq. 1-12 (stream model), Sec. IV-A multilevel domains";
  // The model's total includes the pre-expert compute that hides the AllGather (Eq. 7); the
  // MoE layer's own time is what it adds on top of that compute.
  e.forward_s = plan.forward.total_seconds - ctx.pre_expert_fwd_s + ctx.esp_reduce_s;
  e.backward_s = bwd.total_seconds - 2 * ctx.pre_expert_fwd_s + ctx.esp_reduce_s + ctx.grad_sync_s;
  // Each GPU also holds the experts gathered from its domains (decoded, full size).
  int gathered = 1;
  for (int s : plan.domain_sizes) gathered *= s;
  e.memory_bytes = ctx.base_memory_bytes + (gathered - 1) * expert_bytes;
  std::vector<int> counts;
  for (int c : span->counts) counts.push_back(c);
  const auto comms = hybridep_total_comms(hybridep_count_comms(counts, plan.domain_sizes));
  e.params = {{"domain_sizes", plan.domain_sizes}, {"p", plan.forward.p}, {"compression", compression},
              {"a2a_ms", plan.forward.a2a_seconds * 1e3},
              {"allgather_ms", plan.forward.allgather_seconds * 1e3},
              {"a2a_pairs", comms.all_to_all}, {"allgather_pairs", comms.all_gather}};
  return e;
}

}  // namespace moecomm::plan

// The HybridEP rows: inside expert domains experts travel (AllGather, optionally SR-
// compressed), across them tokens (A2A); domain sizes per level (HybridEP Sec. III, IV-A).
#include <algorithm>

#include "plan/estimates.h"
#include "plan/hybridep_domains.h"
#include "plan/hybridep_planner.h"

namespace moecomm::plan {

namespace {

struct HybridTimes {
  double a2a = 0, forward = 0, backward = 0;
  HybridEpLayerTimes model_forward;
};

// HybridEP's stream model gives the A2A share that is left and the AllGather time; the A2A
// itself is priced like the baseline's (latencies and efficiency curves included), so that
// domain size 1 is exactly the baseline. The expert compute is not overlapped here: Eq. 7
// credits that to prior pipelining work, which is FSMoE's and Lina's row.
HybridTimes evaluate(const EstimateContext& ctx, const HybridEpLayerInput& in,
                     const HybridEpBackwardInput& back, const std::vector<int>& sizes,
                     double plain_a2a_model) {
  HybridTimes t;
  t.model_forward = hybridep_layer_times(in, sizes);
  const HybridEpLayerTimes bwd = hybridep_backward_times(in, back, sizes);
  t.a2a =
      plain_a2a_model > 0 ? ctx.flat_a2a_s * t.model_forward.a2a_seconds / plain_a2a_model : 0.0;
  const double pre = ctx.pre_expert_fwd_s;
  t.forward = std::max(0.0, t.model_forward.allgather_seconds - pre) + ep_forward(ctx, t.a2a);
  t.backward = std::max(0.0, bwd.allgather_seconds - 2 * pre) + ep_backward(ctx, t.a2a);
  return t;
}

// Every combination of per-level domain sizes (divisors of the level's count).
void all_sizes(const std::vector<int>& counts, std::vector<int>& cur,
               std::vector<std::vector<int>>& out) {
  if (cur.size() == counts.size()) {
    out.push_back(cur);
    return;
  }
  const int c = counts[cur.size()];
  for (int s = 1; s <= c; ++s) {
    if (c % s) continue;
    cur.push_back(s);
    all_sizes(counts, cur, out);
    cur.pop_back();
  }
}

// The setting priced: experts travel inside domains of `sizes` per level (Sec. IV-A), each
// sending 1 / SR of its bytes (Sec. III-D).
sched::Strategy hybrid_knobs(const std::string& name, const std::vector<int>& sizes, double sr) {
  sched::Strategy s;
  s.name = name;
  s.expert_transfer = sched::ExpertTransfer::kHybrid;
  s.hybrid_levels = sizes;
  s.hybrid_domain = 1;
  for (int size : sizes) s.hybrid_domain *= size;
  s.compression = 1.0 / sr;
  return s;
}

}  // namespace

std::optional<StrategyEstimate> estimate_hybridep(const EstimateContext& ctx, double sr,
                                                  std::string& why) {
  const auto& w = ctx.work;
  auto span = group_span(ctx.topology, w.groups.ep.front());
  if (!span || span->levels.empty()) {
    why = span ? "the EP group has one rank: nothing to move"
               : "the EP group is not a sub-grid of the levels";
    return std::nullopt;
  }
  HybridEpLayerInput in;
  for (size_t i = 0; i < span->levels.size(); ++i)
    in.levels.push_back({span->counts[i], ctx.topology.device_bandwidth(span->levels[i])});
  const double expert_bytes = w.expert_grad_bytes;  // one rank's expert shards, as weights
  in.data_bytes = w.a2a_bytes;
  in.expert_bytes = expert_bytes / sr;
  const int n = std::max(1, static_cast<int>(w.experts_per_rank));
  in.compute = {ctx.pre_expert_fwd_s, ctx.expert_fwd_s, n};
  const HybridEpBackwardInput back{expert_bytes,
                                   {2 * ctx.pre_expert_fwd_s, 2 * ctx.expert_fwd_s, n}};
  const double plain = hybridep_layer_times(in, std::vector<int>(in.levels.size(), 1)).a2a_seconds;
  // The planner's choice: the domain sizes with the least forward + backward time.
  std::vector<std::vector<int>> candidates;
  std::vector<int> cur;
  all_sizes(span->counts, cur, candidates);
  std::vector<int> best_sizes;
  HybridTimes best;
  for (const auto& sizes : candidates) {
    HybridTimes t = evaluate(ctx, in, back, sizes, plain);
    if (best_sizes.empty() || t.forward + t.backward < best.forward + best.backward) {
      best = t;
      best_sizes = sizes;
    }
  }
  StrategyEstimate e;
  e.name = sr > 1 ? "hybridep-sr" : "hybridep";
  e.source = "HybridEP Eq. 1-12 (stream model), Sec. IV-A multilevel domains, Algorithm 1";
  e.forward_s = best.forward;
  e.backward_s = best.backward;
  e.knobs = hybrid_knobs(e.name, best_sizes, sr);
  // Each GPU also holds the experts gathered from its domains (decoded, full size).
  e.memory_bytes = ctx.base_memory_bytes + (e.knobs.hybrid_domain - 1) * expert_bytes;
  const auto comms = hybridep_total_comms(hybridep_count_comms(span->counts, best_sizes));
  const HybridEpPlan paper = hybridep_plan(in);
  e.a2a_s = best.a2a;
  e.hybridep = HybridEpFigures{best.model_forward.p, best.model_forward.allgather_seconds,
                               comms.all_to_all, comms.all_gather, paper.domain_sizes};
  return e;
}

}  // namespace moecomm::plan

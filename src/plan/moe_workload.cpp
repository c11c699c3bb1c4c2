#include "plan/moe_workload.h"

#include "core/error.h"
#include "cost/collective_model.h"

namespace moecomm::plan {

MoeWorkload derive_workload(const PlanInput& in, const cost::CollectiveModel& model) {
  MoeWorkload w;
  static_cast<sched::LayerWorkload&>(w) = sched::layer_workload(in.model, in.parallel);
  w.experts_per_rank = double(in.model.experts) / in.parallel.ep;
  w.groups = core::build_rank_groups(in.parallel);
  w.a2a_level_share = model.alltoall_level_shares(w.groups.ep.front());
  w.inter_level = model.bottleneck_level(w.groups.ep.front());
  return w;
}

std::optional<core::ParallelConfig> with_ep(const PlanInput& in, int ep) {
  const auto& p = in.parallel;
  const core::ParallelSpec spec{p.dp, p.tp, ep, p.esp, p.pp, p.cp, p.cp_layout};
  try {
    return core::resolve_parallel(spec, in.cluster.world_size(), static_cast<int>(in.model.experts),
                                  "ep");
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace moecomm::plan

#pragma once
// A shipped model preset as the planner's input: on its own testbed with its own parallel
// sizes, or on `cluster` with derived ones.
#include <string>

#include "core/presets.h"
#include "plan/strategy_table.h"

namespace moecomm::plan {

inline PlanInput preset_input(const std::string& model_name, const std::string& cluster = "") {
  PlanInput in;
  in.model = core::load_model(model_name);
  in.cluster = core::load_cluster(
      !cluster.empty() ? cluster : in.model.cluster.value_or(core::kDefaultCluster));
  core::ParallelSpec spec =
      cluster.empty() && in.model.parallel ? *in.model.parallel : core::ParallelSpec{};
  in.parallel = core::resolve_parallel(spec, in.cluster.world_size(), in.model.experts, "test");
  return in;
}

}  // namespace moecomm::plan

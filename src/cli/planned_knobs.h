#pragma once
// The knobs a --strategy string leaves open, chosen by the planner for a model, cluster and
// parallel configuration (shared by `moecomm sim` and the Python package's simulate), so
// `--strategy monta-o2` simulates the N that `moecomm plan` shows.
#include <string>
#include <vector>

#include "cli/model_setup.h"
#include "sched/layer_builder.h"

namespace moecomm::cli {

// Sets layer.strategy and layer.parallel: Lina packs its experts (the EP size of `moecomm
// plan`'s lina row) unless the user gave ep. `flag` names the strategy argument in errors
// ("--strategy"). Returns the notes, one a knob.
std::vector<std::string> planned_knobs(const ModelSetup& setup, const std::string& strategy,
                                       bool ep_given, const std::string& flag,
                                       sched::LayerSetup& layer);

}  // namespace moecomm::cli

#pragma once
// The A2A routing a Python call prices or builds a step with (moecomm.simulate,
// build_schedule), as `moecomm sim --routing --locality` takes it: "uniform", "synthetic"
// with data locality (samples at home, or where NetMoE's placement puts them), or "auto"
// (synthetic for placement=netmoe, else uniform).
#include <optional>
#include <string>

#include "cli/model_setup.h"
#include "cli/routed_dispatch.h"
#include "sched/layer_builder.h"

namespace moecomm::python {

// Throws Error naming "routing" or "locality".
void check_routing(const std::string& routing, double locality);

// With a synthetic routing, sets layer.a2a_pair_bytes (layer.strategy and layer.parallel set)
// and returns the routed dispatch; nullopt for uniform. Throws Error for placement=netmoe
// with routing "uniform".
std::optional<cli::RoutedDispatch> route(const cli::ModelSetup& setup, const std::string& routing,
                                         double locality, sched::LayerSetup& layer);

}  // namespace moecomm::python

#pragma once
// Dispatch byte matrices for the simulator from routing (NetMoE in the simulated step,
// plan/step_service.h): one synthetic routing per EP group (generate_routing_trace), the
// samples at home or where NetMoE's two-stage placement puts them for this layer's gather +
// next scatter.
#include <string>
#include <vector>

#include "core/model_setup.h"
#include "place/synthetic_routing.h"

namespace moecomm::place {

struct RoutedDispatch {
  std::vector<std::vector<double>> matrices;  // per EP group, n x n bytes, member i -> j
  double inter_node_bytes = 0;                // all groups, one dispatch
  double placement_solve_us = 0;              // all groups (0 at home)
};

// spec supplies locality, skew, correlation and seed; shapes come from the model (samples
// = micro-batch per EP member, tokens = seq_len / cp, experts, top_k, router_groups,
// router_group_top_k: node-limited routing). Throws Error when an
// EP group's members are spread unevenly over nodes (the placement's equal shares).
RoutedDispatch routed_dispatch(const core::ModelSetup& setup, SyntheticRoutingSpec spec,
                               bool netmoe_placement, const std::string& solver);

}  // namespace moecomm::place

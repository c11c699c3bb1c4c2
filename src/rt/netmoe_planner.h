#pragma once
// NetMoE Alg. 1 line 9's problem for one layer, as every EP member builds it from the group's
// gathered per-sample counts: gather(l) by the true counts plus scatter(l+1) by the routing
// predictor's estimate (Sec. 3.3). Every member builds and solves the same deterministic
// problem, so all agree on the placement without a broadcast.
#include <vector>

#include "core/rank_groups.h"
#include "place/routing.h"
#include "place/routing_predictor.h"
#include "place/traffic.h"

namespace moecomm::rt {

// Nodes of the EP group's members (node = global rank / ranks_per_node): consecutive
// members, the same count per node. Throws Error otherwise.
place::DeviceGrid ep_device_grid(const core::RankGroup& ep, int ranks_per_node);

class NetMoePlanner {
 public:
  NetMoePlanner(const core::RankGroup& ep, int ranks_per_node, int layers, int experts);

  // gathered: every member's block (its B sample ids, then their B x E expert counts),
  // member-major. Throws Error on a block of the wrong size or a sample id out of range.
  place::RoutingCounts problem(int layer, const std::vector<int>& gathered, int batch);
  const std::vector<int>& expert_device() const { return expert_device_; }
  const place::DeviceGrid& grid() const { return grid_; }
  int members() const { return members_; }

 private:
  int members_, layers_, experts_;
  place::DeviceGrid grid_;
  std::vector<int> expert_device_;
  place::RoutingPredictor predictor_;
  std::vector<place::RoutingCounts> counts_;  // per layer: this iteration's true counts
};

}  // namespace moecomm::rt

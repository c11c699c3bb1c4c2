#include "rt/netmoe_planner.h"

#include <string>

#include "core/error.h"
#include "rt/comm.h"

namespace moecomm::rt {

place::DeviceGrid ep_device_grid(const core::RankGroup& ep, int ranks_per_node) {
  const int rpn = std::max(ranks_per_node, 1);
  std::vector<int> per_node;  // members per node, in member order
  for (size_t i = 0; i < ep.size(); ++i) {
    if (i > 0 && ep[i] / rpn < ep[i - 1] / rpn)
      throw Error("placement=netmoe", "the EP group " + group_text(ep) + " is not node-major");
    if (i == 0 || ep[i] / rpn != ep[i - 1] / rpn) per_node.push_back(0);
    ++per_node.back();
  }
  for (int n : per_node)
    if (n != per_node.front())
      throw Error("placement=netmoe", "the EP group " + group_text(ep) +
                                          " must hold the same number of ranks on every node "
                                          "(ranks_per_node " +
                                          std::to_string(ranks_per_node) + ")");
  return {static_cast<int>(per_node.size()), per_node.front()};
}

NetMoePlanner::NetMoePlanner(const core::RankGroup& ep, int ranks_per_node, int layers, int experts)
    : members_(static_cast<int>(ep.size())),
      layers_(layers),
      experts_(experts),
      grid_(ep_device_grid(ep, ranks_per_node)),
      expert_device_(place::expert_blocks(experts, members_)),
      predictor_(layers, experts),
      counts_(static_cast<size_t>(layers)) {}

// The l+1 term of Eq. 5 uses the routing predictor; before it has statistics for this layer,
// layer l's own counts stand in for layer l+1's. The last layer has no next scatter: its
// gather alone.
place::RoutingCounts NetMoePlanner::problem(int layer, const std::vector<int>& all, int batch) {
  if (layer < 0 || layer >= layers_) throw Error("netmoe", "layer out of range");
  const size_t per = static_cast<size_t>(batch) * (1 + static_cast<size_t>(experts_));
  if (batch < 1 || all.size() != per * static_cast<size_t>(members_))
    throw Error("netmoe", "the gathered counts have " + std::to_string(all.size()) +
                              " ints, expected " + std::to_string(per * size_t(members_)));
  const int samples = batch * members_;
  place::RoutingCounts num(samples, experts_);
  for (int m = 0; m < members_; ++m)
    for (int i = 0; i < batch; ++i) {
      const int gid = all[m * per + static_cast<size_t>(i)];
      if (gid < 0 || gid >= samples) throw Error("netmoe", "sample id out of range");
      for (int e = 0; e < experts_; ++e)
        num.at(gid, e) = all[m * per + static_cast<size_t>(batch + i * experts_ + e)];
    }
  if (layer > 0 && counts_[static_cast<size_t>(layer - 1)].samples == num.samples)
    predictor_.observe(layer - 1, counts_[static_cast<size_t>(layer - 1)], num);
  counts_[static_cast<size_t>(layer)] = num;
  if (layer + 1 == layers_) return num;
  return place::add_counts(num,
                           predictor_.has_statistics(layer) ? predictor_.predict(layer, num) : num);
}

}  // namespace moecomm::rt

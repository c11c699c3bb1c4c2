#include "sim/network_model.h"

#include <string>

namespace moecomm::sim {

NetworkModel::NetworkModel(const core::Topology& topology, FlowNetwork& network)
    : topology_(topology) {
  for (int k = 0; k < topology.num_levels(); ++k) {
    const core::Level& level = topology.level(k);
    per_worker_.push_back(topology.ranks_per_worker(k));
    first_egress_.push_back(network.num_links());
    const int workers = topology.world_size() / per_worker_.back();
    for (int w = 0; w < workers; ++w) {  // egress then ingress, adjacent per worker
      const std::string name = level.name + "[" + std::to_string(w) + "]";
      network.add_link(level.bandwidth, level.latency, name + ".out");
      has_overhead_ = has_overhead_ || level.overhead > 0;
      network.add_link(level.bandwidth, 0.0, name + ".in");
    }
  }
  end_ = network.num_links();
}

int NetworkModel::egress_level(int link) const {
  if (first_egress_.empty() || link < first_egress_.front() || link >= end_) return -1;
  int k = static_cast<int>(first_egress_.size()) - 1;
  while (link < first_egress_[k]) --k;
  return (link - first_egress_[k]) % 2 == 0 ? k : -1;
}

int NetworkModel::meet_level(int a, int b) const {
  for (int k = 0; k < static_cast<int>(per_worker_.size()); ++k) {
    if (a / per_worker_[k] != b / per_worker_[k]) return k;
  }
  return -1;
}

std::vector<int> NetworkModel::path(int a, int b) const {
  const int k = meet_level(a, b);
  return {first_egress_[k] + 2 * (a / per_worker_[k]),
          first_egress_[k] + 2 * (b / per_worker_[k]) + 1};
}

double NetworkModel::latency(int a, int b) const {
  return topology_.level(meet_level(a, b)).latency;
}

double NetworkModel::overhead(int a, int b) const {
  return topology_.level(meet_level(a, b)).overhead;
}

long long NetworkModel::path_key(int a, int b) const {
  const std::vector<int> p = path(a, b);
  return static_cast<long long>(p[0]) << 32 | static_cast<unsigned>(p[1]);
}

}  // namespace moecomm::sim

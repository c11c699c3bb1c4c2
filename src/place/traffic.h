#pragma once
// Traffic of one A2A (scatter or gather) by link level, NetMoE Eq. 3-4 generalised to the
// cluster's levels, and its time by Eq. 1.
#include <cstdint>
#include <vector>

#include "core/topology.h"
#include "place/routing.h"

namespace moecomm::place {

// Samples sit on devices (ranks of the cluster) in equal shares; nodes are the workers of
// the level above the innermost one (NetMoE's Node(j)).
struct DeviceGrid {
  int nodes = 1;
  int devices_per_node = 1;

  static DeviceGrid of(const core::Topology& topology);
  int devices() const { return nodes * devices_per_node; }
  int node_of(int device) const { return device / devices_per_node; }
};

struct A2ATraffic {
  int64_t same_device = 0;               // tokens that stay on their device (not sent)
  std::vector<int64_t> tokens_by_level;  // tokens whose path crosses each level's link
  // Per level: the most tokens one worker of that level sends or receives over its link.
  std::vector<int64_t> busiest_worker_tokens;

  int64_t inter_node() const;  // NetMoE s_inter (Eq. 3): every level but the innermost
  int64_t intra_node() const;  // NetMoE s_intra: the innermost level
};

// Tokens num[i][e] travel between sample_device[i] and expert_device[e] (the direction does
// not change the volumes). Throws Error on a device outside the topology or a shape mismatch.
A2ATraffic a2a_traffic(const RoutingCounts& num, const std::vector<int>& sample_device,
                       const std::vector<int>& expert_device, const core::Topology& topology);

// NetMoE Eq. 1, t = max over levels of (alpha + beta * s), where s is the busiest worker's
// bytes on that level's link (the level's bandwidth is one worker's, DESIGN.md); for
// balanced traffic this is Eq. 1 with s the per-worker volume. Levels with no traffic
// cost nothing.
double a2a_time(const A2ATraffic& traffic, const core::Topology& topology, double bytes_per_token);

// The placement without NetMoE: samples in order, device by device, in equal shares.
std::vector<int> home_placement(int samples, int devices);
// Experts in equal contiguous blocks: expert e on device floor(e * J / E).
std::vector<int> expert_blocks(int experts, int devices);
// How many samples each device holds in an equal split (the first I mod J hold one more).
std::vector<int> device_capacities(int samples, int devices);

}  // namespace moecomm::place

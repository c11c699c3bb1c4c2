#include "place/traffic.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace moecomm::place {

DeviceGrid DeviceGrid::of(const core::Topology& topology) {
  DeviceGrid grid;
  grid.devices_per_node = topology.level(topology.num_levels() - 1).count;
  grid.nodes = topology.world_size() / grid.devices_per_node;
  return grid;
}

int64_t A2ATraffic::inter_node() const {
  int64_t sum = 0;
  for (size_t k = 0; k + 1 < tokens_by_level.size(); ++k) sum += tokens_by_level[k];
  return sum;
}

int64_t A2ATraffic::intra_node() const {
  return tokens_by_level.empty() ? 0 : tokens_by_level.back();
}

namespace {

void check_devices(const std::vector<int>& devices, int world, const char* what) {
  for (size_t x = 0; x < devices.size(); ++x) {
    if (devices[x] < 0 || devices[x] >= world) {
      throw Error(std::string(what) + "[" + std::to_string(x) + "]",
                  "device " + std::to_string(devices[x]) + " is outside [0, " +
                      std::to_string(world) + ")");
    }
  }
}

}  // namespace

A2ATraffic a2a_traffic(const RoutingCounts& num, const std::vector<int>& sample_device,
                       const std::vector<int>& expert_device, const core::Topology& topology) {
  if (sample_device.size() != static_cast<size_t>(num.samples)) {
    throw Error("sample_device", "has " + std::to_string(sample_device.size()) +
                                     " entries, expected one per sample (" +
                                     std::to_string(num.samples) + ")");
  }
  if (expert_device.size() != static_cast<size_t>(num.experts)) {
    throw Error("expert_device", "has " + std::to_string(expert_device.size()) +
                                     " entries, expected one per expert (" +
                                     std::to_string(num.experts) + ")");
  }
  const int world = topology.world_size();
  check_devices(sample_device, world, "sample_device");
  check_devices(expert_device, world, "expert_device");
  const int levels = topology.num_levels();
  std::vector<int> per_worker(levels);
  std::vector<std::vector<int64_t>> sent(levels), received(levels);
  for (int k = 0; k < levels; ++k) {
    per_worker[k] = topology.ranks_per_worker(k);
    sent[k].assign(world / per_worker[k], 0);
    received[k].assign(world / per_worker[k], 0);
  }
  A2ATraffic traffic;
  traffic.tokens_by_level.assign(levels, 0);
  for (int i = 0; i < num.samples; ++i) {
    const int src = sample_device[i];
    for (int e = 0; e < num.experts; ++e) {
      const int64_t tokens = num.at(i, e);
      if (tokens == 0) continue;
      const int dst = expert_device[e];
      int k = 0;
      while (k < levels && src / per_worker[k] == dst / per_worker[k]) ++k;
      if (k == levels) {
        traffic.same_device += tokens;
        continue;
      }
      traffic.tokens_by_level[k] += tokens;
      sent[k][src / per_worker[k]] += tokens;
      received[k][dst / per_worker[k]] += tokens;
    }
  }
  for (int k = 0; k < levels; ++k) {
    traffic.busiest_worker_tokens.push_back(
        std::max(*std::max_element(sent[k].begin(), sent[k].end()),
                 *std::max_element(received[k].begin(), received[k].end())));
  }
  return traffic;
}

double a2a_time(const A2ATraffic& traffic, const core::Topology& topology, double bytes_per_token) {
  double time = 0;
  for (int k = 0; k < topology.num_levels(); ++k) {
    const int64_t tokens = traffic.busiest_worker_tokens.at(k);
    if (tokens == 0) continue;
    const core::Level& level = topology.level(k);
    time = std::max(time, level.latency + tokens * bytes_per_token / level.bandwidth);
  }
  return time;
}

std::vector<int> expert_blocks(int experts, int devices) {
  std::vector<int> device(experts);
  for (int e = 0; e < experts; ++e) {
    device[e] = static_cast<int>(static_cast<int64_t>(e) * devices / experts);
  }
  return device;
}

std::vector<int> device_capacities(int samples, int devices) {
  std::vector<int> capacity(devices, samples / devices);
  for (int d = 0; d < samples % devices; ++d) ++capacity[d];
  return capacity;
}

std::vector<int> home_placement(int samples, int devices) {
  std::vector<int> placement;
  placement.reserve(samples);
  const std::vector<int> capacity = device_capacities(samples, devices);
  for (int d = 0; d < devices; ++d) placement.insert(placement.end(), capacity[d], d);
  return placement;
}

}  // namespace moecomm::place

#pragma once
// One placement instance given directly as counts (`moecomm place --counts FILE`):
// {"num": [[...], ...], "expert_device": [...], "devices_per_node": G,
//  "devices": J (optional), "sample_device": [...] (optional)}
// num is samples x experts for one gather(l) + scatter(l+1) pair. J defaults to the
// smallest multiple of G that holds every expert's device; sample_device, the placement
// before NetMoE, defaults to samples in order in equal shares.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "place/routing.h"
#include "place/traffic.h"

namespace moecomm::place {

struct CountsInstance {
  RoutingCounts num;
  std::vector<int> expert_device;
  DeviceGrid grid;
  std::vector<int> sample_device;
};

CountsInstance parse_counts(const nlohmann::json& doc, const std::string& where);
CountsInstance read_counts_file(const std::string& path);

}  // namespace moecomm::place

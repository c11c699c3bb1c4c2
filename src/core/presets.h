#pragma once
// Shipped presets (data/clusters, data/models) and user files in the same format: wherever a
// preset name is accepted, a path to a JSON file works too.
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model_config.h"

namespace moecomm::core {

inline constexpr const char* kDefaultCluster = "fsmoe-testbed-a";
inline constexpr const char* kDefaultModel = "fsmoe-mixtral-22b";

// $MOECOMM_DATA_DIR if set, else the data/ folder of the source tree.
std::string data_dir();
// Preset names of a kind ("clusters" or "models"), sorted.
std::vector<std::string> list_presets(const std::string& kind);

// A path (contains '/', ends in .json, or names an existing file) is read as a file;
// anything else is a preset name. Errors name the file, or list the presets.
Cluster load_cluster(const std::string& name_or_file);
ModelConfig load_model(const std::string& name_or_file);

}  // namespace moecomm::core

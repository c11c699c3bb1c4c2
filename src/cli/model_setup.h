#pragma once
// The model, cluster and parallel configuration a command runs on, from its --model,
// --cluster and --parallel flags (shared by `plan` and `sim`).
#include <string>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"

namespace moecomm::cli {

struct ModelSetup {
  core::ModelConfig model;
  core::Cluster cluster;
  core::ParallelConfig parallel;
};

// Empty arguments take the defaults: the default model; the model's own testbed, else the
// default cluster; the model file's parallel sizes when it runs on its own testbed, else
// derived ones. Throws Error naming the flag or file.
ModelSetup resolve_model_setup(const std::string& model, const std::string& cluster,
                               const std::string& parallel, int64_t seq_len = 0,
                               int64_t micro_batch = 0);

}  // namespace moecomm::cli

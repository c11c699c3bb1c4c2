#pragma once
// The model, cluster and parallel configuration a run is for, from the user's model, cluster
// and parallel arguments (`moecomm plan` and `moecomm sim`'s flags, the Python package's
// arguments): one set of rules for every caller.
#include <optional>
#include <string>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"

namespace moecomm::core {

struct ModelSetup {
  core::ModelConfig model;
  core::Cluster cluster;
  core::ParallelConfig parallel;
};

// Empty arguments take the defaults: the default model; the model's own testbed, else the
// default cluster; the model file's parallel sizes when the cluster has its testbed's shape
// (level counts; names are not compared), else derived ones. Throws Error naming the flag or
// file.
ModelSetup resolve_model_setup(const std::string& model, const std::string& cluster,
                               const std::string& parallel, int64_t seq_len = 0,
                               int64_t micro_batch = 0);

// The parallel sizes of a model read and a cluster read (the Python package reads them from
// dicts too): `parallel` as the user gave it (nullopt: the model file's sizes when the cluster
// has its testbed's shape, else derived ones). `flag` names the user's argument in errors
// ("--parallel"). Throws Error naming it or the model file.
ModelSetup resolve_model_setup(core::ModelConfig model, core::Cluster cluster,
                               const std::optional<core::ParallelSpec>& parallel,
                               const std::string& flag);

}  // namespace moecomm::core

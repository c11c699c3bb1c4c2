#include "core/model_setup.h"

#include <utility>

#include "core/error.h"
#include "core/presets.h"

namespace moecomm::core {

namespace {

// The testbed a model file names (its "cluster" key); errors blame that key.
core::Cluster model_testbed(const core::ModelConfig& model) {
  try {
    return core::load_cluster(*model.cluster);
  } catch (const Error& e) {
    throw Error(model.source + ": cluster", e.what());
  }
}

// A model file's parallel sizes are the paper's for its testbed's shape: they apply to a
// cluster with the testbed's levels (the same counts, outermost first), whatever its name,
// since a copy of the preset keeps the name when it changes the shape.
bool has_testbed_shape(const core::ModelConfig& model, const core::Cluster& cluster) {
  if (!model.cluster) return false;
  const core::Cluster testbed = model_testbed(model);
  if (testbed.levels.size() != cluster.levels.size()) return false;
  for (size_t i = 0; i < testbed.levels.size(); ++i)
    if (testbed.levels[i].count != cluster.levels[i].count) return false;
  return true;
}

}  // namespace

ModelSetup resolve_model_setup(const std::string& model, const std::string& cluster,
                               const std::string& parallel, int64_t seq_len, int64_t micro_batch) {
  core::ModelConfig m = core::load_model(model.empty() ? core::kDefaultModel : model);
  if (seq_len > 0) m.seq_len = seq_len;
  if (micro_batch > 0) m.micro_batch = micro_batch;
  core::Cluster c = !cluster.empty() ? core::load_cluster(cluster)
                    : m.cluster      ? model_testbed(m)
                                     : core::load_cluster(core::kDefaultCluster);
  std::optional<core::ParallelSpec> spec;
  if (!parallel.empty()) spec = core::parse_parallel_spec(parallel, "--parallel");
  return resolve_model_setup(std::move(m), std::move(c), spec, "--parallel");
}

ModelSetup resolve_model_setup(core::ModelConfig model, core::Cluster cluster,
                               const std::optional<core::ParallelSpec>& parallel,
                               const std::string& flag) {
  // An override of seq_len or micro_batch may break what the file's sizes kept.
  core::check_model_sizes(model, model.source);
  ModelSetup s;
  s.model = std::move(model);
  s.cluster = std::move(cluster);
  // Which parallel sizes apply, and the name errors about them use.
  core::ParallelSpec spec;
  std::string where = "derived parallel configuration (give " + flag + ")";
  if (parallel) {
    spec = *parallel;
    where = flag;
  } else if (s.model.parallel && has_testbed_shape(s.model, s.cluster)) {
    spec = *s.model.parallel;
    where = s.model.source + ": parallel";
  }
  s.parallel = core::resolve_parallel(spec, s.cluster.world_size(),
                                      static_cast<int>(s.model.experts), where);
  core::check_parallel_fits_model(s.parallel, s.model, where);
  return s;
}

}  // namespace moecomm::core

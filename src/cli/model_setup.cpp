#include "cli/model_setup.h"

#include <utility>

#include "core/presets.h"

namespace moecomm::cli {

ModelSetup resolve_model_setup(const std::string& model, const std::string& cluster,
                               const std::string& parallel, int64_t seq_len, int64_t micro_batch) {
  core::ModelConfig m = core::load_model(model.empty() ? core::kDefaultModel : model);
  if (seq_len > 0) m.seq_len = seq_len;
  if (micro_batch > 0) m.micro_batch = micro_batch;
  core::Cluster c =
      core::load_cluster(cluster.empty() ? m.cluster.value_or(core::kDefaultCluster) : cluster);
  std::optional<core::ParallelSpec> spec;
  if (!parallel.empty()) spec = core::parse_parallel_spec(parallel, "--parallel");
  return resolve_model_setup(std::move(m), std::move(c), spec, "--parallel");
}

ModelSetup resolve_model_setup(core::ModelConfig model, core::Cluster cluster,
                               const std::optional<core::ParallelSpec>& parallel,
                               const std::string& flag) {
  ModelSetup s;
  s.model = std::move(model);
  s.cluster = std::move(cluster);
  // Which parallel sizes apply, and the name errors about them use.
  core::ParallelSpec spec;
  std::string where = "derived parallel configuration (give " + flag + ")";
  if (parallel) {
    spec = *parallel;
    where = flag;
  } else if (s.model.parallel && s.model.cluster == s.cluster.name) {
    spec = *s.model.parallel;
    where = s.model.source + ": parallel";
  }
  s.parallel = core::resolve_parallel(spec, s.cluster.world_size(),
                                      static_cast<int>(s.model.experts), where);
  core::check_parallel_fits_model(s.parallel, s.model, where);
  return s;
}

}  // namespace moecomm::cli

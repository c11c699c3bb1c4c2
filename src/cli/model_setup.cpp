#include "cli/model_setup.h"

#include "core/presets.h"

namespace moecomm::cli {

ModelSetup resolve_model_setup(const std::string& model, const std::string& cluster,
                               const std::string& parallel, int64_t seq_len, int64_t micro_batch) {
  ModelSetup s;
  s.model = core::load_model(model.empty() ? core::kDefaultModel : model);
  if (seq_len > 0) s.model.seq_len = seq_len;
  if (micro_batch > 0) s.model.micro_batch = micro_batch;
  s.cluster = core::load_cluster(cluster.empty() ? s.model.cluster.value_or(core::kDefaultCluster)
                                                 : cluster);
  // Which parallel sizes apply, and the name errors about them use.
  core::ParallelSpec spec;
  std::string where = "derived parallel configuration (give --parallel)";
  if (!parallel.empty()) {
    spec = core::parse_parallel_spec(parallel, "--parallel");
    where = "--parallel";
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

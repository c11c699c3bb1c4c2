#include "inputs.h"

#include <optional>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/presets.h"
#include "py_json.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

std::string type_name(const py::handle& obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

// A str or os.PathLike names a preset or a file; a dict is the file's content.
bool is_name(const py::handle& obj) {
  return py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__");
}

std::string name_of(const py::handle& obj) {
  return py::str(py::module_::import("os").attr("fspath")(obj)).cast<std::string>();
}

core::ModelConfig model_of(const py::object& model) {
  if (model.is_none()) return core::load_model(core::kDefaultModel);
  if (is_name(model)) return core::load_model(name_of(model));
  if (py::isinstance<py::dict>(model)) return core::parse_model(to_json(model, "model"), "model");
  throw Error("model",
              "must be a preset name, a JSON file path or a dict, got a " + type_name(model));
}

core::Cluster cluster_of(const py::object& cluster, const core::ModelConfig& model) {
  if (cluster.is_none()) return core::load_cluster(model.cluster.value_or(core::kDefaultCluster));
  if (is_name(cluster)) return core::load_cluster(name_of(cluster));
  if (py::isinstance<py::dict>(cluster))
    return core::parse_cluster(to_json(cluster, "cluster"), "cluster");
  throw Error("cluster",
              "must be a preset name, a JSON file path or a dict, got a " + type_name(cluster));
}

}  // namespace

core::ParallelSpec parallel_spec(const py::object& parallel) {
  if (parallel.is_none()) return {};
  if (py::isinstance<py::str>(parallel))
    return core::parse_parallel_spec(parallel.cast<std::string>(), "parallel");
  if (py::isinstance<py::dict>(parallel))
    return core::parse_parallel_json(to_json(parallel, "parallel"), "parallel");
  throw Error("parallel",
              "must be \"dp=2,tp=8,...\", a dict or None, got a " + type_name(parallel));
}

core::ModelSetup resolve_setup(const py::object& model, const py::object& cluster,
                               const py::object& parallel, int64_t seq_len, int64_t micro_batch) {
  if (seq_len < 0 || seq_len > core::kMaxSeqLen)
    throw Error("seq_len", "must be in [1, " + std::to_string(core::kMaxSeqLen) + "]");
  if (micro_batch < 0 || micro_batch > core::kMaxMicroBatch)
    throw Error("micro_batch", "must be in [1, " + std::to_string(core::kMaxMicroBatch) + "]");
  core::ModelConfig m = model_of(model);
  if (seq_len > 0) m.seq_len = seq_len;
  if (micro_batch > 0) m.micro_batch = micro_batch;
  core::Cluster c = cluster_of(cluster, m);
  std::optional<core::ParallelSpec> spec;
  if (!parallel.is_none()) spec = parallel_spec(parallel);
  return core::resolve_model_setup(std::move(m), std::move(c), spec, "parallel");
}

}  // namespace moecomm::python

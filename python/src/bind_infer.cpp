// moecomm.infer: Lina's popularity-aware inference (Sec. 5.2): expert-path profiles from
// routing, the next layer's estimated popularity for a batch (Eq. 1), and the two-phase
// replication plan.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "core/error.h"
#include "infer/path_profile.h"
#include "infer/popularity_estimator.h"
#include "infer/replication_planner.h"
#include "place/routing_trace.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

std::string index_path(const std::string& where, std::initializer_list<int64_t> idx) {
  std::string s = where;
  for (auto i : idx) s += "[" + std::to_string(i) + "]";
  return s;
}

// layers x samples x tokens x top_k ids, each in [0, experts), as one iteration's routing.
std::vector<place::LayerRouting> layers_of(const py::array_t<int64_t>& a, int experts,
                                           const std::string& where, int64_t iteration = -1) {
  const auto L = a.shape(a.ndim() - 4), S = a.shape(a.ndim() - 3), T = a.shape(a.ndim() - 2),
             K = a.shape(a.ndim() - 1);
  if (S < 1 || T < 1 || K < 1)
    throw Error(where, "needs at least one sample, token and choice per token");
  if (L * S * T * K > place::kMaxTraceIds) throw Error(where, "too many expert ids");
  const int64_t* p = a.data() + (iteration < 0 ? 0 : iteration * L * S * T * K);
  std::vector<place::LayerRouting> out;
  for (int64_t l = 0; l < L; ++l) {
    place::LayerRouting r(static_cast<int>(S), static_cast<int>(T), static_cast<int>(K));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t e = *p++;
          if (e < 0 || e >= experts) {
            const std::string at = iteration < 0 ? index_path(where, {l, s, t, k})
                                                 : index_path(where, {iteration, l, s, t, k});
            throw Error(at, "expert id " + std::to_string(e) + " is outside [0, " +
                                std::to_string(experts) + ")");
          }
          r.at(static_cast<int>(s), static_cast<int>(t), static_cast<int>(k)) =
              static_cast<int32_t>(e);
        }
    out.push_back(std::move(r));
  }
  return out;
}

place::RoutingTrace trace_of(const py::handle& routing, int experts) {
  if (experts < 1 || experts > place::kMaxExperts)
    throw Error("experts", "must be in [1, " + std::to_string(place::kMaxExperts) + "]");
  const auto a = int_array(routing, 5, "routing");
  place::RoutingTrace trace;
  trace.experts = experts;
  trace.top_k = static_cast<int>(a.shape(4));
  if (trace.top_k > experts)
    throw Error("routing", "top_k = " + std::to_string(trace.top_k) + " choices per token exceed " +
                               std::to_string(experts) + " experts");
  for (py::ssize_t it = 0; it < a.shape(0); ++it)
    trace.iterations.push_back(layers_of(a, experts, "routing", it));
  if (trace.iterations.empty()) throw Error("routing", "needs at least one iteration");
  return trace;
}

class Estimator {
 public:
  Estimator(const py::handle& routing, int experts, int path_length, int64_t min_tokens)
      : profile_(std::make_unique<infer::PathProfile>(trace_of(routing, experts), path_length,
                                                      min_tokens)) {}

  // Lina Eq. 1 for the tokens of `batch` (layers 0..layer of one batch, samples x tokens x
  // top_k each): the estimated share of layer+1's token-slots per expert.
  py::array_t<double> estimate(const py::handle& batch, int layer, std::optional<int> top_k) const {
    const auto a = int_array(batch, 4, "batch");
    if (layer < 0 || layer >= a.shape(0))
      throw Error("layer", std::to_string(layer) + " is outside the batch's layers [0, " +
                               std::to_string(a.shape(0)) + ")");
    const std::vector<place::LayerRouting> routing = layers_of(a, profile_->experts(), "batch");
    std::vector<double> pop;
    {
      py::gil_scoped_release release;
      const auto paths =
          infer::token_paths(routing, layer, profile_->path_length(), 0, routing.front().samples());
      pop = infer::estimate_popularity(*profile_, layer, paths, top_k.value_or(profile_->top_k()));
    }
    return to_numpy(pop);
  }

  py::array_t<double> marginal(int layer) const {
    if (layer < 0 || layer >= profile_->layers())
      throw Error("layer", std::to_string(layer) + " is outside [0, " +
                               std::to_string(profile_->layers()) + ")");
    std::vector<double> out(static_cast<size_t>(profile_->experts()), 0.0);
    for (const auto& s : profile_->marginal(layer)) out[static_cast<size_t>(s.expert)] = s.share;
    return to_numpy(out);
  }

  const infer::PathProfile& profile() const { return *profile_; }

 private:
  std::unique_ptr<infer::PathProfile> profile_;
};

infer::ReplicationOptions options_of(int devices, int max_experts_per_device) {
  if (devices < 1) throw Error("devices", "must be >= 1, got " + std::to_string(devices));
  return {devices, max_experts_per_device};
}

std::vector<double> doubles(const py::handle& obj, const std::string& where) {
  py::array a = py::module_::import("numpy").attr("asarray")(obj);
  if (a.ndim() != 1) throw Error(where, "must be a 1-D array, one entry per expert");
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw Error(where, "must hold numbers, got dtype " + py::str(a.dtype()).cast<std::string>());
  const auto d = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<double>(d.data(), d.data() + d.size());
}

std::vector<int64_t> counts(const py::handle& obj, const std::string& where) {
  const auto a = int_array(obj, 1, where);
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

}  // namespace

void bind_infer(py::module_& m) {
  py::class_<infer::ReplicationPlan>(m, "ReplicationPlan",
                                     "Which devices host each expert's replicas (Lina Sec. 5.2).")
      .def_readonly("devices_of_expert", &infer::ReplicationPlan::devices_of_expert,
                    "for each expert, the devices hosting one of its replicas (ascending)")
      .def_readonly("max_over_mean", &infer::ReplicationPlan::max_over_mean,
                    "max/mean device load under the popularity it was planned from (phase "
                    "two: the actual counts); 1 is balanced")
      .def_readonly("ep_max_over_mean", &infer::ReplicationPlan::ep_max_over_mean,
                    "the same for plain EP (expert e on device e * devices // experts)")
      .def("experts_of_device", &infer::ReplicationPlan::experts_of_device, py::arg("devices"),
           "for each of `devices` devices, the experts it hosts (ascending)")
      .def("__repr__", [](const infer::ReplicationPlan& p) {
        char figures[96];
        std::snprintf(figures, sizeof figures, ", max_over_mean=%.3f, ep_max_over_mean=%.3f)",
                      p.max_over_mean, p.ep_max_over_mean);
        return "ReplicationPlan(experts=" + std::to_string(p.devices_of_expert.size()) + figures;
      });

  py::class_<Estimator>(m, "PopularityEstimator")
      .def(py::init<const py::handle&, int, int, int64_t>(), py::arg("routing"), py::arg("experts"),
           py::arg("path_length"), py::arg("min_tokens"))
      .def("estimate", &Estimator::estimate, py::arg("batch"), py::arg("layer"),
           py::arg("top_k") = py::none())
      .def("marginal", &Estimator::marginal, py::arg("layer"))
      .def_property_readonly("experts", [](const Estimator& e) { return e.profile().experts(); })
      .def_property_readonly("top_k", [](const Estimator& e) { return e.profile().top_k(); })
      .def_property_readonly("layers", [](const Estimator& e) { return e.profile().layers(); })
      .def_property_readonly("path_length",
                             [](const Estimator& e) { return e.profile().path_length(); });

  m.def(
      "plan_replication",
      [](const py::handle& popularity, int devices, int max_experts_per_device) {
        const auto pop = doubles(popularity, "popularity");
        const auto options = options_of(devices, max_experts_per_device);
        py::gil_scoped_release release;
        return infer::plan_replication(pop, options);
      },
      py::arg("popularity"), py::arg("devices"), py::arg("max_experts_per_device"));
  m.def(
      "fine_tune",
      [](const infer::ReplicationPlan& phase_one, const py::handle& estimated,
         const py::handle& actual_counts, int top_k, int devices, int max_experts_per_device) {
        const auto est = doubles(estimated, "estimated");
        const auto actual = counts(actual_counts, "actual_counts");
        if (actual.size() != est.size())
          throw Error("actual_counts", "has " + std::to_string(actual.size()) +
                                           " entries, estimated has " + std::to_string(est.size()));
        const auto options = options_of(devices, max_experts_per_device);
        infer::PhaseTwo two;
        {
          py::gil_scoped_release release;
          two = infer::fine_tune(phase_one, est, actual, top_k, options);
        }
        return py::make_tuple(two.replanned, two.plan);
      },
      py::arg("phase_one"), py::arg("estimated"), py::arg("actual_counts"), py::arg("top_k"),
      py::arg("devices"), py::arg("max_experts_per_device"));
  m.def(
      "expert_counts",
      [](const py::handle& layer_routing, int experts) {
        const auto a = int_array(layer_routing, 3, "layer_routing");
        // One layer: reshape to a one-layer routing and count.
        const auto four = py::array_t<int64_t>(
            std::vector<py::ssize_t>{1, a.shape(0), a.shape(1), a.shape(2)}, a.data());
        if (experts < 1) throw Error("experts", "must be >= 1");
        const auto layers = layers_of(four, experts, "layer_routing");
        return to_numpy(infer::expert_counts(layers.front(), experts, 0, layers.front().samples()));
      },
      py::arg("layer_routing"), py::arg("experts"));
  m.def(
      "device_loads",
      [](const infer::ReplicationPlan& plan, const py::handle& counts_obj, int devices) {
        return to_numpy(infer::device_loads(plan, counts(counts_obj, "counts"), devices));
      },
      py::arg("plan"), py::arg("counts"), py::arg("devices"));
  m.def("same_top_experts", &infer::same_top_experts, py::arg("estimated"), py::arg("actual"),
        py::arg("n"));
}

}  // namespace moecomm::python

// The extension module: one Python exception type for every moecomm::Error (what the CLI
// prints after "error: "), then the layers' bindings.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "core/error.h"
#include "core/model_config.h"
#include "core/presets.h"

namespace py = pybind11;

PYBIND11_MODULE(_moecomm, m) {
  m.doc() = "moecomm's C++ core: planner, simulator, NetMoE placement, Lina's estimator";
  // A subclass of ValueError: every moecomm::Error is bad user input, with the message the
  // command line prints after "error: ".
  py::register_exception<moecomm::Error>(m, "Error", PyExc_ValueError);
  m.def("presets", &moecomm::core::list_presets, py::arg("kind"),
        "preset names of a kind (\"models\" or \"clusters\"), sorted");
  // Node-limited routing's one rule (core/model_config.h), for moecomm.torch's gates.
  m.def(
      "router_groups_problem",
      [](int64_t experts, int64_t top_k, int64_t groups,
         int64_t group_top_k) -> std::optional<std::pair<std::string, std::string>> {
        const auto p = moecomm::core::router_groups_problem(experts, top_k, groups, group_top_k);
        if (!p) return std::nullopt;
        return std::pair{p->key, p->message};
      },
      py::arg("experts"), py::arg("top_k"), py::arg("router_groups"), py::arg("router_group_top_k"),
      "None when the shape is valid, else (the key at fault, why)");
  m.def("limits_groups", &moecomm::core::limits_groups, py::arg("router_groups"),
        py::arg("router_group_top_k"), "whether the limit leaves any expert out");
  moecomm::python::bind_plan(m);
  moecomm::python::bind_sim(m);
  moecomm::python::bind_place(m);
  moecomm::python::bind_infer(m);
  moecomm::python::bind_sched(m);
  moecomm::python::bind_codec(m);
  moecomm::python::bind_routing(m);
  moecomm::python::bind_hybrid(m);
}

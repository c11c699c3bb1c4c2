// moecomm.plan: `moecomm plan`'s rows and recommendation as objects (plan::make_plan).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "core/error.h"
#include "inputs.h"
#include "plan/estimate_params.h"
#include "plan/search_planner.h"
#include "py_json.h"
#include "sched/strategy.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

// A plan with the input it was made for (plan_to_json and the header fields need both).
struct PlanResult {
  plan::Plan plan;
  plan::PlanInput input;
};

PlanResult make_plan(const py::object& model, const py::object& cluster, const py::object& parallel,
                     int64_t seq_len, int64_t micro_batch, int layers, double budget_s, int zero,
                     const std::string& recompute) {
  // The CLI's ranges (plan_command.cpp), named by the Python argument.
  if (layers < 1 || layers > 64)
    throw Error("layers", "must be in [1, 64], got " + std::to_string(layers));
  if (zero < 0 || zero > 3)
    throw Error("zero", "ZeRO stage must be 0-3, got " + std::to_string(zero));
  if (!(budget_s >= 0 && budget_s <= 86400))  // also NaN
    throw Error("budget_s", "must be a finite number of seconds in [0, 86400]");
  if (recompute != "none" && recompute != "selective" && recompute != "full")
    throw Error("recompute", "must be none, selective or full, got \"" + recompute + "\"");
  const core::ModelSetup setup = resolve_setup(model, cluster, parallel, seq_len, micro_batch);
  PlanResult r;
  r.input.model = setup.model;
  r.input.cluster = setup.cluster;
  r.input.parallel = setup.parallel;
  r.input.zero = zero;
  r.input.recompute = recompute;
  plan::SearchOptions options;
  options.layers = layers;
  options.budget_s = budget_s;
  {
    // The search simulates candidates for up to budget_s: let other Python threads run.
    py::gil_scoped_release release;
    r.plan = plan::make_plan(r.input, options);
  }
  return r;
}

py::object model_estimate(const plan::PlanRow& r) {
  if (!r.model) return py::none();
  py::dict d;
  d["forward_ms"] = r.model->forward_s * 1e3;
  d["backward_ms"] = r.model->backward_s * 1e3;
  d["total_ms"] = r.model->total_s() * 1e3;
  return d;
}

}  // namespace

void bind_plan(py::module_& m) {
  py::class_<plan::PlanRow>(m, "PlanRow",
                            "One row of a plan: a method (or the search's best) priced by "
                            "simulating one training step, beside its paper model's estimate.")
      .def_readonly("name", &plan::PlanRow::name,
                    "baseline, hier-a2a, monta-o1..o3, fsmoe, lina, hybridep, ... or searched")
      .def_property_readonly(
          "forward_ms", [](const plan::PlanRow& r) { return r.simulated.forward_s * 1e3; },
          "simulated forward time of the step, ms")
      .def_property_readonly(
          "backward_ms", [](const plan::PlanRow& r) { return r.simulated.backward_s * 1e3; },
          "simulated backward time of the step, ms")
      .def_property_readonly(
          "total_ms", [](const plan::PlanRow& r) { return r.simulated.step_s * 1e3; },
          "simulated step (makespan), ms")
      .def_property_readonly(
          "memory_GB", [](const plan::PlanRow& r) { return r.memory_bytes / 1e9; },
          "memory per device, GB (MoNTA Eq. 1 plus HybridEP's expert copies)")
      .def_property_readonly(
          "strategy", [](const plan::PlanRow& r) { return sched::to_string(r.candidate.strategy); },
          "the --strategy string that re-runs the row (moecomm.simulate's strategy)")
      .def_property_readonly(
          "parallel",
          [](const plan::PlanRow& r) { return plan::parallel_string(r.candidate.parallel); },
          "the row's parallel sizes as \"dp=..,tp=..,...\" (Lina may change ep)")
      .def_property_readonly(
          "params",
          [](const plan::PlanRow& r) {
            return r.model ? from_json(plan::estimate_params(*r.model)) : py::dict();
          },
          "the paper model's knobs and figures (times in ms), as in plan --json")
      .def_property_readonly(
          "source",
          [](const plan::PlanRow& r) {
            return r.model ? r.model->source : "coordinate search, priced by the simulator";
          },
          "the paper and section the estimate follows")
      .def_property_readonly("model_estimate", &model_estimate,
                             "{forward_ms, backward_ms, total_ms} of the paper model, or None")
      .def_readonly("notes", &plan::PlanRow::notes, "where the planned knobs came from")
      .def("__repr__", [](const plan::PlanRow& r) {
        return "PlanRow(name='" + r.name +
               "', total_ms=" + std::to_string(r.simulated.step_s * 1e3) + ", strategy='" +
               sched::to_string(r.candidate.strategy) + "')";
      });

  py::class_<plan::SearchStats>(m, "SearchStats", "How the knob search went.")
      .def_readonly("candidates", &plan::SearchStats::candidates,
                    "distinct candidates simulated, the method rows included")
      .def_readonly("refused", &plan::SearchStats::refused,
                    "candidates the schedule builder refused")
      .def_readonly("wall_s", &plan::SearchStats::wall_s, "wall-clock seconds of the plan")
      .def_readonly("converged", &plan::SearchStats::converged,
                    "False: the budget ran out before a pass improved nothing");

  py::class_<PlanResult>(m, "Plan", "`moecomm plan --json` as an object.")
      .def_property_readonly(
          "rows", [](const PlanResult& p) { return p.plan.rows; },
          "the method rows in table order, then 'searched' if the search beat them")
      .def_property_readonly(
          "recommended",
          [](const PlanResult& p) -> py::object {
            if (p.plan.recommended.empty()) return py::none();
            return py::str(p.plan.recommended);
          },
          "name of the simulated fastest row that fits the device memory; None when none fits")
      .def_property_readonly(
          "best",
          [](const PlanResult& p) -> plan::PlanRow {
            if (p.plan.shortfall)
              throw Error("plan", "nothing fits the device's memory: " +
                                      plan::shortfall_text(*p.plan.shortfall));
            return p.plan.row(p.plan.recommended);
          },
          "the recommended row (raises moecomm.Error when nothing fits)")
      .def(
          "row",
          [](const PlanResult& p, const py::handle& name) {
            if (!py::isinstance<py::str>(name))
              throw Error(
                  "name",
                  "must be a str, got a " +
                      py::str(py::type::handle_of(name).attr("__name__")).cast<std::string>());
            return p.plan.row(name.cast<std::string>());
          },
          py::arg("name"), "the row named `name`; raises moecomm.Error when absent")
      .def_property_readonly(
          "skipped",
          [](const PlanResult& p) {
            py::dict d;
            for (const auto& s : p.plan.skipped) d[py::str(s.name)] = s.reason;
            return d;
          },
          "methods whose model does not apply here: {name: reason}")
      .def_property_readonly(
          "model_fastest", [](const PlanResult& p) { return p.plan.estimates.fastest; },
          "the row the paper models rank first")
      .def_property_readonly(
          "search", [](const PlanResult& p) { return p.plan.search; }, "the search's statistics")
      .def_property_readonly(
          "layers", [](const PlanResult& p) { return p.plan.layers; },
          "MoE blocks per simulated step")
      .def_property_readonly(
          "model", [](const PlanResult& p) { return p.input.model.name; }, "model name")
      .def_property_readonly(
          "cluster", [](const PlanResult& p) { return p.input.cluster.name; }, "cluster name")
      .def_property_readonly(
          "world", [](const PlanResult& p) { return p.input.cluster.world_size(); },
          "devices of the cluster")
      .def_property_readonly(
          "parallel", [](const PlanResult& p) { return from_json(p.input.parallel.to_json()); },
          "the parallel sizes planned for, edp included")
      .def_property_readonly(
          "workload", [](const PlanResult& p) { return from_json(p.plan.estimates.workload); },
          "derived quantities the estimates share (bytes, times)")
      .def(
          "to_dict",
          [](const PlanResult& p) { return from_json(plan::plan_to_json(p.plan, p.input)); },
          "the object `moecomm plan --json` prints");

  m.def("plan", &make_plan, py::arg("model"), py::arg("cluster"), py::arg("parallel"),
        py::arg("seq_len"), py::arg("micro_batch"), py::arg("layers"), py::arg("budget_s"),
        py::arg("zero"), py::arg("recompute"),
        "plan::make_plan on a resolved model, cluster and parallel configuration");
}

}  // namespace moecomm::python

// moecomm.simulate: one training step of a strategy in the flow-level simulator, through the
// service `moecomm sim` runs it with (plan/step_service.h), with its times, bytes by level
// and, on request, the Chrome trace.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"
#include "inputs.h"
#include "plan/step_service.h"
#include "py_json.h"
#include "routing_args.h"
#include "sim/trace_export.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

struct SimOutcome {
  double iteration_ms = 0, forward_ms = 0, backward_ms = 0;
  std::vector<std::string> level_names;  // outermost first
  std::vector<double> bytes_by_level;    // egress bytes over each level's links
  int64_t flows = 0;
  int ranks = 0, schedule_ops = 0;
  double wall_s = 0;  // building and simulating the schedule
  std::string strategy;
  std::vector<std::string> strategy_notes;
  nlohmann::json report;                  // plan::step_json: ops by kind, busiest links
  std::optional<nlohmann::json> routing;  // routed steps: locality, placement, bytes
  std::optional<nlohmann::json> trace;    // Chrome trace, when asked for
};

struct SimArgs {
  std::string strategy, fairness, routing;
  int layers = 0;              // 0: one per stage and virtual stage
  int64_t micro_batches = 0;   // 0: the model's
  std::string pp_schedule;     // empty: the strategy's
  int zero = -1;               // -1: the strategy's
  double compute_efficiency = 0, completion_tolerance = 0, locality = 0;
  bool trace = false;
};

// Checked before the inputs are resolved; returns the routing.
plan::StepRouting check_args(const SimArgs& a) {
  if (a.layers < 0 || a.layers > core::kMaxLayers)
    throw Error("layers", "must be in [1, " + std::to_string(core::kMaxLayers) + "] (or None: one "
                          "per pipeline stage), got " + std::to_string(a.layers));
  if (a.compute_efficiency != 0 && !(a.compute_efficiency >= 0.01 && a.compute_efficiency <= 1))
    throw Error("compute_efficiency", "must be in [0.01, 1] (or None: the device's)");
  if (!(a.completion_tolerance >= 0 && a.completion_tolerance <= 0.1))
    throw Error("completion_tolerance", "must be in [0, 0.1]");
  if (!a.fairness.empty()) core::parse_fairness(a.fairness, "fairness");
  return routing_arg(a.routing, a.locality);
}

SimOutcome simulate(const py::object& model, const py::object& cluster, const py::object& parallel,
                    const SimArgs& args) {
  plan::StepRequest request;
  request.routing = check_args(args);
  request.setup = resolve_setup(model, cluster, parallel);
  request.ep_given = parallel_spec(parallel).ep.has_value();
  request.strategy = args.strategy;
  request.layers = args.layers;
  request.micro_batches = static_cast<int>(args.micro_batches);
  request.pp_schedule = args.pp_schedule;
  request.zero = args.zero;
  request.locality = args.locality;
  request.names = step_arg_names();
  py::gil_scoped_release release;  // building and simulating take milliseconds to seconds
  const sim::SimOptions options = plan::step_sim_options(
      args.compute_efficiency, args.completion_tolerance, args.fairness, request.names);
  const plan::SimulatedStep step = plan::simulate_step(plan::prepare_step(request), options);
  SimOutcome out;
  out.iteration_ms = step.report.iteration_s * 1e3;
  out.forward_ms = step.report.forward_s * 1e3;
  out.backward_ms = step.report.backward_s * 1e3;
  for (const auto& level : request.setup.cluster.levels) out.level_names.push_back(level.name);
  out.bytes_by_level = step.result.bytes_by_level;
  out.flows = step.result.flows;
  out.ranks = step.schedule.world_size();
  out.schedule_ops = step.schedule.num_ops();
  out.wall_s = step.wall_s;
  out.strategy = sched::to_string(step.prepared.layer.strategy);
  out.strategy_notes = step.prepared.notes;
  out.report = plan::step_json(step);
  out.routing = plan::routing_json(step.prepared);
  if (args.trace) out.trace = sim::chrome_trace(step.schedule, step.result);
  return out;
}

}  // namespace

void bind_sim(py::module_& m) {
  py::class_<SimOutcome>(m, "SimResult",
                         "One simulated training step (`moecomm sim --json` as an object).")
      .def_readonly("iteration_ms", &SimOutcome::iteration_ms, "makespan of the step, ms")
      .def_readonly("forward_ms", &SimOutcome::forward_ms,
                    "first forward op's start to the last forward op's end, ms")
      .def_readonly("backward_ms", &SimOutcome::backward_ms,
                    "last forward op's end to the last backward op's end, ms")
      .def_readonly("level_names", &SimOutcome::level_names,
                    "the cluster's levels, outermost first")
      .def_readonly("bytes_by_level", &SimOutcome::bytes_by_level,
                    "bytes sent over each level's links (egress), outermost first")
      .def_property_readonly(
          "bytes_by_level_name",
          [](const SimOutcome& s) {
            py::dict d;
            for (size_t i = 0; i < s.level_names.size() && i < s.bytes_by_level.size(); ++i)
              d[py::str(s.level_names[i])] = s.bytes_by_level[i];
            return d;
          },
          "{level name: bytes}")
      .def_readonly("flows", &SimOutcome::flows, "flows the network carried")
      .def_readonly("ranks", &SimOutcome::ranks, "ranks of the schedule")
      .def_readonly("schedule_ops", &SimOutcome::schedule_ops, "ops of the schedule")
      .def_readonly("wall_s", &SimOutcome::wall_s, "seconds spent building and simulating")
      .def_readonly("strategy", &SimOutcome::strategy, "the full strategy string simulated")
      .def_readonly("strategy_notes", &SimOutcome::strategy_notes,
                    "where the planner chose the knobs the strategy left open")
      .def_property_readonly(
          "ops", [](const SimOutcome& s) { return from_json(s.report.at("ops")); },
          "{op kind: {count, flops, bytes, busy_ms_per_rank}}")
      .def_property_readonly(
          "busiest_links",
          [](const SimOutcome& s) { return from_json(s.report.at("busiest_links")); },
          "[{name, bytes, busy_ms}], most bytes first")
      .def_property_readonly(
          "routing",
          [](const SimOutcome& s) { return s.routing ? from_json(*s.routing) : py::none(); },
          "routed steps: {source, locality, placement, dispatch_inter_node_MB, "
          "placement_solve_us}; None for uniform routing")
      .def_property_readonly(
          "trace", [](const SimOutcome& s) { return s.trace ? from_json(*s.trace) : py::none(); },
          "the Chrome trace (Trace Event Format dict) when simulate(trace=True), else None")
      .def("__repr__", [](const SimOutcome& s) {
        return "SimResult(iteration_ms=" + std::to_string(s.iteration_ms) + ", strategy='" +
               s.strategy + "')";
      });

  m.def(
      "simulate",
      [](const py::object& model, const py::object& cluster, const py::object& parallel,
         const std::string& strategy, int layers, double compute_efficiency,
         double completion_tolerance, const std::string& fairness, const std::string& routing,
         double locality, bool trace, int64_t micro_batches, const std::string& pp_schedule,
         int zero) {
        SimArgs a{strategy,   fairness,      routing,     layers, micro_batches,
                  pp_schedule, zero,         compute_efficiency, completion_tolerance,
                  locality,   trace};
        return simulate(model, cluster, parallel, a);
      },
      py::arg("model"), py::arg("cluster"), py::arg("parallel"), py::arg("strategy"),
      py::arg("layers"), py::arg("compute_efficiency"), py::arg("completion_tolerance"),
      py::arg("fairness"), py::arg("routing"), py::arg("locality"), py::arg("trace"),
      py::arg("micro_batches") = 0, py::arg("pp_schedule") = "", py::arg("zero") = -1,
      "build and simulate one training step");
  m.attr("DEFAULT_COMPLETION_TOLERANCE") = sim::SimOptions{}.completion_tolerance;
}

}  // namespace moecomm::python

#pragma once
// The one resolve -> build -> simulate -> report service of a training step: `moecomm sim`,
// moecomm.simulate and moecomm._moecomm.build_schedule all call it, so one strategy string on
// one model, cluster and parallel configuration gives one schedule, one set of times and one
// report wherever it is asked for.
//
// The stages, each callable alone: prepare_step plans the knobs the strategy leaves open (as
// `moecomm plan` would, Lina's expert packing included) and routes the dispatch (uniform, or
// a synthetic routing with samples at home or placed by NetMoE); build_step builds the
// schedule; simulate_step builds and simulates it; step_json reports it.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model_setup.h"
#include "place/routed_dispatch.h"
#include "sched/layer_builder.h"
#include "sched/schedule.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"

namespace moecomm::plan {

// How the A2A byte matrices are sized: evenly (uniform), from a synthetic routing with data
// locality (synthetic), or synthetic for placement=netmoe and uniform otherwise (auto).
enum class StepRouting { kAuto, kUniform, kSynthetic };

// "auto", "uniform" or "synthetic"; throws Error at `where` otherwise.
StepRouting parse_step_routing(std::string_view text, const std::string& where);

// What the user's arguments are called in errors: the CLI's flags by default, the Python
// package's keywords when it calls.
struct StepArgNames {
  std::string strategy = "--strategy";
  std::string routing = "--routing";
  std::string ask_synthetic = "--routing synthetic";  // how the user asks for synthetic routing
  std::string fairness = "--fairness";
  std::string layers = "--layers";
  std::string micro_batches = "--micro-batches";
  std::string pp_schedule = "--pp-schedule";
  std::string zero = "--zero";
};

struct StepRequest {
  core::ModelSetup setup;  // resolved (core::resolve_model_setup)
  std::string strategy = "baseline";
  bool ep_given = false;  // the user gave ep: Lina keeps it instead of packing its experts
  // The transformer blocks the step runs, over all pipeline stages (at most the model's); 0:
  // one per stage and virtual stage, the papers' per-layer figures.
  int layers = 0;
  int micro_batches = 0;    // per step; 0: the model's micro_batches
  std::string pp_schedule;  // the pp_schedule knob; empty: the strategy's
  int zero = -1;            // the zero knob; -1: the strategy's
  bool lm_head = false;   // the whole model's step (sched::LayerSetup::lm_head)
  StepRouting routing = StepRouting::kAuto;
  double locality = 0.9;  // synthetic routing: share of a sample's tokens on its preferred experts
  StepArgNames names;
};

// What the schedule is built from: the strategy with its planned knobs, the parallel sizes
// (after Lina's packing), the layers and, for a routed step, the dispatch matrices.
struct PreparedStep {
  sched::LayerSetup layer;
  std::vector<std::string> notes;               // where the planner chose a knob, one a line
  std::optional<place::RoutedDispatch> routed;  // nullopt: uniform routing
  double locality = 0;                          // of the routed step
};

// Throws Error naming the strategy argument (a bad strategy), the routing argument
// (placement=netmoe with uniform routing) or the setup that cannot be routed.
PreparedStep prepare_step(const StepRequest& request);

// The simulator's options from the user's values: compute_efficiency 0 takes the device's,
// an empty fairness the cluster's. Throws Error naming names.fairness.
sim::SimOptions step_sim_options(double compute_efficiency, double completion_tolerance,
                                 const std::string& fairness, const StepArgNames& names = {});

// The step's schedule (sched::build_training_step of step.layer).
sched::Schedule build_step(const PreparedStep& step);

struct SimulatedStep {
  PreparedStep prepared;
  sched::Schedule schedule{1};
  sim::SimResult result;
  sim::SimReport report;
  double wall_s = 0;  // building and simulating the schedule
};

SimulatedStep simulate_step(PreparedStep step, const sim::SimOptions& options);

// A routed step's {source, locality, placement, dispatch_inter_node_MB, placement_solve_us};
// nullopt for uniform routing.
std::optional<nlohmann::json> routing_json(const PreparedStep& step);

// `moecomm sim --json`: sim::report_to_json with the strategy, its notes, the model, cluster,
// ranks, schedule size, wall time and, for a routed step, routing_json.
nlohmann::json step_json(const SimulatedStep& step);

}  // namespace moecomm::plan

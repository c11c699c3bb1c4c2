#include "plan/step_service.h"

#include <chrono>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/optional_library.h"
#include "core/topology.h"
#include "plan/planned_strategy.h"

namespace moecomm::plan {

namespace {

// Sets layer.strategy and layer.parallel: the knobs the strategy string leaves open come
// from the planner's estimate of the method, so `--strategy monta-o2` simulates the N that
// `moecomm plan` shows; Lina packs its experts (the EP size of plan's lina row) unless the
// user gave ep. Returns the notes, one a knob.
std::vector<std::string> plan_knobs(const StepRequest& request, sched::LayerSetup& layer) {
  PlanInput in;
  in.model = request.setup.model;
  in.cluster = request.setup.cluster;
  in.parallel = request.setup.parallel;
  const sched::ParsedStrategy parsed =
      sched::parse_strategy_knobs(request.strategy, request.names.strategy);
  std::string notes;
  if (!MOECOMM_HAVE_NLOPT && parsed.method == "fsmoe") {
    // FSMoE's knobs come from NLopt's searches (estimate_fsmoe): a step refuses to run on
    // defaults nobody chose, where the plan table keeps them with the skip's note.
    std::string open;
    for (const auto& knob : open_planned_knobs(parsed)) open += (open.empty() ? "" : ", ") + knob;
    if (!open.empty())
      throw core::missing_library("plan", "planning strategy fsmoe's " + open,
                                  core::OptionalLibrary::kNlopt);
  }
  if (parsed.method == "lina" && !request.ep_given) {
    const ModelEstimates estimates = estimate_strategies(in);
    std::string packing;
    if (auto packed = lina_packed_parallel(in, estimates, &packing)) {
      notes = packing + "\n";
      in.parallel = *packed;
    }
    layer.strategy = planned_strategy(parsed, in, estimates, &notes);
  } else {
    layer.strategy = planned_strategy(parsed, in, &notes);
  }
  layer.parallel = in.parallel;
  std::vector<std::string> lines;
  std::istringstream in_lines(notes);
  for (std::string line; std::getline(in_lines, line);) lines.push_back(line);
  return lines;
}

// The step-wide settings given beside the strategy (--pp-schedule, --zero) set its knobs; the
// same knob given twice with two values is refused.
void apply_step_knobs(const StepRequest& request, sched::Strategy& strategy) {
  const sched::ParsedStrategy parsed =
      sched::parse_strategy_knobs(request.strategy, request.names.strategy);
  if (!request.pp_schedule.empty()) {
    sched::Strategy asked = strategy;
    sched::parse_pp_schedule(asked, request.pp_schedule, request.names.pp_schedule);
    if (parsed.is_explicit("pp_schedule") &&
        sched::pp_schedule_name(asked) != sched::pp_schedule_name(strategy))
      throw Error(request.names.pp_schedule,
                  request.pp_schedule + " differs from the strategy's pp_schedule=" +
                      sched::pp_schedule_name(strategy) + ": give it once");
    strategy.pp_schedule = asked.pp_schedule;
    strategy.virtual_stages = asked.virtual_stages;
  }
  if (request.zero >= 0) {
    if (request.zero > 3) throw Error(request.names.zero, "must be 0, 1, 2 or 3");
    if (parsed.is_explicit("zero") && request.zero != strategy.zero)
      throw Error(request.names.zero, std::to_string(request.zero) +
                                          " differs from the strategy's zero=" +
                                          std::to_string(strategy.zero) + ": give it once");
    strategy.zero = request.zero;
  }
  sched::validate(strategy, request.names.strategy);
}

// The blocks the step runs: the user's count, at most the model's, else one per virtual stage.
int step_layers(const StepRequest& request, const sched::LayerSetup& layer) {
  const int64_t model = layer.model.layers;
  const int per_stage = layer.parallel.pp * layer.strategy.virtual_stages;
  if (request.layers == 0) return per_stage;
  if (request.layers < 0 || request.layers > model)
    throw Error(request.names.layers, "must be in [1, " + std::to_string(model) +
                                          "] (the model's layers, over all pipeline stages), got " +
                                          std::to_string(request.layers));
  if (request.layers < per_stage)
    throw Error(request.names.layers,
                std::to_string(request.layers) + " blocks cannot fill pp = " +
                    std::to_string(layer.parallel.pp) + " stages x " +
                    std::to_string(layer.strategy.virtual_stages) +
                    " virtual stages: give at least " + std::to_string(per_stage));
  return request.layers;
}

}  // namespace

StepRouting parse_step_routing(std::string_view text, const std::string& where) {
  if (text == "auto") return StepRouting::kAuto;
  if (text == "uniform") return StepRouting::kUniform;
  if (text == "synthetic") return StepRouting::kSynthetic;
  throw Error(where, "must be auto, uniform or synthetic, got \"" + std::string(text) + "\"");
}

PreparedStep prepare_step(const StepRequest& request) {
  PreparedStep step;
  sched::LayerSetup& layer = step.layer;
  layer.model = request.setup.model;
  layer.cluster = request.setup.cluster;
  step.notes = plan_knobs(request, layer);
  apply_step_knobs(request, layer.strategy);
  layer.layers = step_layers(request, layer);
  if (request.micro_batches < 0 || request.micro_batches > core::kMaxMicroBatch)
    throw Error(request.names.micro_batches,
                "must be in [1, " + std::to_string(core::kMaxMicroBatch) + "], got " +
                    std::to_string(request.micro_batches));
  layer.micro_batches = static_cast<int>(request.micro_batches > 0 ? request.micro_batches
                                                                   : layer.model.micro_batches);
  layer.model.micro_batches = layer.micro_batches;
  layer.lm_head = request.lm_head;
  const bool netmoe = layer.strategy.placement == sched::Placement::kNetMoe;
  if (netmoe && request.routing == StepRouting::kUniform)
    throw Error(request.names.routing, "placement=netmoe moves samples by their routing: use " +
                                           request.names.ask_synthetic +
                                           " (the default for netmoe), not uniform");
  if (request.routing == StepRouting::kSynthetic ||
      (request.routing == StepRouting::kAuto && netmoe)) {
    place::SyntheticRoutingSpec spec;
    spec.locality = request.locality;
    spec.layer_correlation = 0.9;
    // Routed on the sizes the step runs with: Lina's packing may have moved the EP size.
    const core::ModelSetup packed{layer.model, layer.cluster, layer.parallel};
    step.routed = place::routed_dispatch(packed, spec, netmoe, "flow");
    step.locality = request.locality;
    layer.a2a_pair_bytes = step.routed->matrices;
  }
  return step;
}

sim::SimOptions step_sim_options(double compute_efficiency, double completion_tolerance,
                                 const std::string& fairness, const StepArgNames& names) {
  sim::SimOptions options;
  if (compute_efficiency > 0) options.compute_efficiency = compute_efficiency;
  options.completion_tolerance = completion_tolerance;
  if (!fairness.empty()) options.fairness = core::parse_fairness(fairness, names.fairness);
  return options;
}

sched::Schedule build_step(const PreparedStep& step) {
  return sched::build_training_step(step.layer);
}

SimulatedStep simulate_step(PreparedStep step, const sim::SimOptions& options) {
  SimulatedStep out;
  const auto start = std::chrono::steady_clock::now();
  out.schedule = build_step(step);
  const core::Topology topology(step.layer.cluster);
  out.result = sim::simulate(out.schedule, topology, options);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.report = sim::make_report(out.schedule, out.result);
  out.prepared = std::move(step);
  return out;
}

std::optional<nlohmann::json> routing_json(const PreparedStep& step) {
  if (!step.routed) return std::nullopt;
  return nlohmann::json{{"source", "synthetic"},
                        {"locality", step.locality},
                        {"placement", std::string(sched::to_string(step.layer.strategy.placement))},
                        {"dispatch_inter_node_MB", step.routed->inter_node_bytes / 1e6},
                        {"placement_solve_us", step.routed->placement_solve_us}};
}

nlohmann::json step_json(const SimulatedStep& step) {
  const sched::LayerSetup& layer = step.prepared.layer;
  nlohmann::json j = sim::report_to_json(step.report, step.result);
  j["strategy"] = sched::to_string(layer.strategy);
  j["strategy_notes"] = step.prepared.notes;
  j["model"] = layer.model.name;
  j["cluster"] = layer.cluster.name;
  j["ranks"] = step.schedule.world_size();
  j["schedule_ops"] = step.schedule.num_ops();
  j["layers"] = layer.layers;
  j["micro_batches"] = layer.micro_batches;
  j["pp_schedule"] = sched::pp_schedule_name(layer.strategy);
  j["wall_s"] = step.wall_s;
  if (auto routing = routing_json(step.prepared)) j["routing"] = std::move(*routing);
  return j;
}

}  // namespace moecomm::plan

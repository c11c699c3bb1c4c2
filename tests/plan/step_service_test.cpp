// The resolve -> build -> simulate -> report service (plan/step_service.h) against the layers
// called by hand: a step it prepares, builds and simulates is the schedule
// sched::build_training_step gives for the same setup and the times sim::simulate gives for
// it, its routed steps carry place::routed_dispatch's matrices, Lina's packing and the
// planner's knobs are plan's own, and its errors name the caller's arguments.
#include "plan/step_service.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/model_setup.h"
#include "core/topology.h"
#include "plan/planned_strategy.h"
#include "sched/layer_builder.h"
#include "sched/strategy.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"
#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

// 16 experts, hidden 256, on 2 nodes x 8 GPUs: 16 ranks, a step simulated in milliseconds.
core::ModelSetup small_setup(const std::string& parallel = "") {
  return core::resolve_model_setup("testbed-moe-s", "netmoe-a800-2x8", parallel);
}

StepRequest request_for(const std::string& strategy, StepRouting routing = StepRouting::kAuto) {
  StepRequest r;
  r.setup = small_setup();
  r.strategy = strategy;
  r.layers = 2;
  r.routing = routing;
  return r;
}

// Every simulated number of two runs of the same schedule: the simulator is deterministic.
void expect_same_run(const SimulatedStep& step, const sched::Schedule& schedule,
                     const sim::SimResult& result) {
  EXPECT_EQ(step.schedule.world_size(), schedule.world_size());
  EXPECT_EQ(step.schedule.num_ops(), schedule.num_ops());
  EXPECT_EQ(step.schedule.num_collectives(), schedule.num_collectives());
  EXPECT_EQ(step.result.makespan_s, result.makespan_s);
  EXPECT_EQ(step.result.flows, result.flows);
  EXPECT_EQ(step.result.bytes_by_level, result.bytes_by_level);
  EXPECT_EQ(step.result.rank_end_s, result.rank_end_s);
  ASSERT_EQ(step.result.ops.size(), result.ops.size());
  for (size_t i = 0; i < result.ops.size(); ++i) {
    EXPECT_EQ(step.result.ops[i].start, result.ops[i].start) << "op " << i;
    EXPECT_EQ(step.result.ops[i].end, result.ops[i].end) << "op " << i;
  }
  const sim::SimReport report = sim::make_report(schedule, result);
  EXPECT_EQ(step.report.iteration_s, report.iteration_s);
  EXPECT_EQ(step.report.forward_s, report.forward_s);
  EXPECT_EQ(step.report.backward_s, report.backward_s);
}

TEST(StepService, AUniformStepIsTheLayersBuildAndSimulationByHand) {
  const StepRequest request = request_for("baseline");
  const SimulatedStep step = simulate_step(prepare_step(request), sim::SimOptions{});

  // By hand: baseline has no knob for the planner, the derived sizes, uniform routing.
  sched::LayerSetup layer;
  layer.model = request.setup.model;
  layer.cluster = request.setup.cluster;
  layer.parallel = request.setup.parallel;
  layer.strategy = sched::parse_strategy("baseline", "test");
  layer.layers = 2;
  const sched::Schedule schedule = sched::build_training_step(layer);
  const sim::SimResult result =
      sim::simulate(schedule, core::Topology(layer.cluster), sim::SimOptions{});

  EXPECT_EQ(sched::to_string(step.prepared.layer.strategy), sched::to_string(layer.strategy));
  EXPECT_EQ(step.prepared.layer.parallel.ep, 16);
  EXPECT_TRUE(step.prepared.notes.empty());
  EXPECT_FALSE(step.prepared.routed.has_value());
  EXPECT_TRUE(step.prepared.layer.a2a_pair_bytes.empty());
  EXPECT_EQ(schedule.world_size(), 16);
  expect_same_run(step, schedule, result);
  EXPECT_GT(result.makespan_s, 0);

  const nlohmann::json j = step_json(step);
  EXPECT_EQ(j["model"], "testbed-moe-s");
  EXPECT_EQ(j["cluster"], "netmoe-a800-2x8");
  EXPECT_EQ(j["ranks"], 16);
  EXPECT_EQ(j["schedule_ops"], schedule.num_ops());
  EXPECT_EQ(j["strategy"], sched::to_string(layer.strategy));
  EXPECT_EQ(j["strategy_notes"], nlohmann::json::array());
  EXPECT_EQ(j["iteration_ms"],
            sim::report_to_json(sim::make_report(schedule, result), result)["iteration_ms"]);
  EXPECT_EQ(j["flows"], result.flows);
  EXPECT_FALSE(j.contains("routing"));
  EXPECT_FALSE(routing_json(step.prepared).has_value());
}

TEST(StepService, BuildStepIsTheScheduleSimulateStepRuns) {
  StepRequest request = request_for("hier-a2a");
  request.lm_head = true;
  const PreparedStep prepared = prepare_step(request);
  EXPECT_TRUE(prepared.layer.lm_head);
  const sched::Schedule built = build_step(prepared);
  const sim::SimOptions options = step_sim_options(0.5, 0.0, "per-flow");
  const SimulatedStep step = simulate_step(prepared, options);
  expect_same_run(step, built,
                  sim::simulate(built, core::Topology(prepared.layer.cluster), options));
}

TEST(StepService, SimOptionsTakeTheUsersValuesOrLeaveTheClustersAndDevices) {
  const sim::SimOptions given = step_sim_options(0.5, 0.01, "per-flow");
  EXPECT_EQ(given.compute_efficiency, 0.5);
  EXPECT_EQ(given.completion_tolerance, 0.01);
  EXPECT_EQ(given.fairness, core::Fairness::kPerFlow);
  const sim::SimOptions left = step_sim_options(0, 0, "");
  EXPECT_FALSE(left.compute_efficiency.has_value());
  EXPECT_FALSE(left.fairness.has_value());
  StepArgNames names;
  names.fairness = "fairness";
  EXPECT_ERROR_HAS(step_sim_options(0, 0, "fair", names), "fairness");
}

TEST(StepService, ARoutedStepCarriesPlacesRoutedDispatch) {
  StepRequest request = request_for("baseline", StepRouting::kSynthetic);
  request.locality = 0.8;
  const PreparedStep prepared = prepare_step(request);

  place::SyntheticRoutingSpec spec;
  spec.locality = 0.8;
  spec.layer_correlation = 0.9;
  const place::RoutedDispatch by_hand =
      place::routed_dispatch(request.setup, spec, /*netmoe_placement=*/false, "flow");
  ASSERT_TRUE(prepared.routed.has_value());
  EXPECT_EQ(prepared.routed->matrices, by_hand.matrices);
  EXPECT_EQ(prepared.layer.a2a_pair_bytes, by_hand.matrices);
  EXPECT_EQ(prepared.routed->inter_node_bytes, by_hand.inter_node_bytes);
  EXPECT_GT(by_hand.inter_node_bytes, 0);
  EXPECT_EQ(prepared.routed->placement_solve_us, 0);

  const std::optional<nlohmann::json> routing = routing_json(prepared);
  ASSERT_TRUE(routing.has_value());
  EXPECT_EQ((*routing)["source"], "synthetic");
  EXPECT_EQ((*routing)["locality"], 0.8);
  EXPECT_EQ((*routing)["placement"], "none");
  EXPECT_EQ((*routing)["dispatch_inter_node_MB"], by_hand.inter_node_bytes / 1e6);
  EXPECT_EQ((*routing)["placement_solve_us"], 0.0);

  sched::LayerSetup layer = prepared.layer;
  layer.a2a_pair_bytes = by_hand.matrices;
  const sched::Schedule schedule = sched::build_training_step(layer);
  const SimulatedStep step = simulate_step(prepared, sim::SimOptions{});
  expect_same_run(step, schedule,
                  sim::simulate(schedule, core::Topology(layer.cluster), sim::SimOptions{}));
  EXPECT_EQ(step_json(step)["routing"], *routing);
}

TEST(StepService, NetMoEIsRoutedByDefaultAndRefusesUniformRouting) {
  const PreparedStep placed = prepare_step(request_for("netmoe"));
  ASSERT_TRUE(placed.routed.has_value());
  EXPECT_EQ(placed.layer.strategy.placement, sched::Placement::kNetMoe);
  EXPECT_EQ((*routing_json(placed))["placement"], "netmoe");
  // NetMoE's placement moves samples off their home members, which the placement at home
  // does not: the two give different dispatches from the same routing.
  place::SyntheticRoutingSpec spec;
  spec.locality = 0.9;
  spec.layer_correlation = 0.9;
  EXPECT_EQ(
      placed.routed->matrices,
      place::routed_dispatch(small_setup(), spec, /*netmoe_placement=*/true, "flow").matrices);
  EXPECT_NE(
      placed.routed->matrices,
      place::routed_dispatch(small_setup(), spec, /*netmoe_placement=*/false, "flow").matrices);

  EXPECT_ERROR_HAS(prepare_step(request_for("netmoe", StepRouting::kUniform)),
                   "--routing: placement=netmoe moves samples by their routing: use --routing "
                   "synthetic (the default for netmoe), not uniform");
  StepRequest python = request_for("netmoe", StepRouting::kUniform);
  python.names.routing = "routing";
  python.names.ask_synthetic = "routing=\"synthetic\"";
  EXPECT_ERROR_HAS(prepare_step(python), "routing: placement=netmoe",
                   "use routing=\"synthetic\" (the default");
}

TEST(StepService, TheStrategysOpenKnobsAreThePlannersAndLinaPacksUnlessEpIsGiven) {
  const StepRequest monta = request_for("monta-o2");
  PlanInput in;
  in.model = monta.setup.model;
  in.cluster = monta.setup.cluster;
  in.parallel = monta.setup.parallel;
  std::string notes;
  const sched::Strategy planned =
      planned_strategy(sched::parse_strategy_knobs("monta-o2", "test"), in, &notes);
  const PreparedStep prepared = prepare_step(monta);
  EXPECT_EQ(sched::to_string(prepared.layer.strategy), sched::to_string(planned));
  std::string joined;
  for (const auto& n : prepared.notes) joined += n + "\n";
  EXPECT_EQ(joined, notes);
  EXPECT_FALSE(prepared.notes.empty());

  const ModelEstimates estimates = estimate_strategies(in);
  std::string packing;
  const std::optional<core::ParallelConfig> packed = lina_packed_parallel(in, estimates, &packing);
  const PreparedStep lina = prepare_step(request_for("lina"));
  ASSERT_TRUE(packed.has_value()) << "the lina estimate keeps ep on this setup";
  EXPECT_EQ(lina.layer.parallel.ep, packed->ep);
  EXPECT_NE(lina.layer.parallel.ep, in.parallel.ep);
  ASSERT_FALSE(lina.notes.empty());
  EXPECT_EQ(lina.notes.front(), packing);

  StepRequest kept = request_for("lina");
  kept.setup = small_setup("ep=16");
  kept.ep_given = true;
  EXPECT_EQ(prepare_step(kept).layer.parallel.ep, 16);
}

TEST(StepService, ErrorsNameTheCallersArguments) {
  EXPECT_ERROR_HAS(parse_step_routing("routed", "routing"),
                   "routing: must be auto, uniform or synthetic, got \"routed\"");
  EXPECT_EQ(parse_step_routing("auto", "--routing"), StepRouting::kAuto);
  EXPECT_EQ(parse_step_routing("uniform", "--routing"), StepRouting::kUniform);
  EXPECT_EQ(parse_step_routing("synthetic", "--routing"), StepRouting::kSynthetic);
  StepRequest bad = request_for("monta-o9");
  bad.names.strategy = "strategy";
  EXPECT_ERROR_HAS(prepare_step(bad), "strategy");
}

}  // namespace
}  // namespace moecomm::plan

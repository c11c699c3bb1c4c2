#include "cli/sim_command.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <ostream>
#include <vector>

#include "cli/flag_checks.h"
#include "cli/json_output.h"
#include "cli/model_setup.h"
#include "cli/planned_knobs.h"
#include "cli/routed_dispatch.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/topology.h"
#include "sched/layer_builder.h"
#include "sim/sim_report.h"
#include "sim/trace_export.h"

namespace moecomm::cli {

SimCommand::SimCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "sim",
      "Build one training step (forward and backward of MoE layers, gradient sync) for a\n"
      "strategy and run it in the flow-level simulator: links shared max-min fairly, every\n"
      "collective decomposed into flows by its algorithm.");
  sub_->add_option("--model", model_,
                   "model preset or JSON file (default: " + std::string(core::kDefaultModel) + ")");
  sub_->add_option("--cluster", cluster_,
                   "cluster preset or JSON file (default: the model's testbed, else " +
                       std::string(core::kDefaultCluster) + ")");
  sub_->add_option("--parallel", parallel_,
                   "parallel sizes, e.g. dp=2,tp=8,ep=2 (as plan --parallel; default: the model's "
                   "own when run on its testbed, else derived)");
  sub_->add_option("--strategy", strategy_,
                   "a strategy name (baseline, hier-a2a, monta-o1, monta-o2, monta-o3, fsmoe, "
                   "lina, hybridep, netmoe) or knobs: base=NAME,a2a=2dh,chunks=4,...; the "
                   "tunable knobs not given (chunks, grad_partitions, hybrid_levels/hybrid_domain, "
                   "compression) come from the planner's estimate of the method")
      ->capture_default_str();
  sub_->add_option("--seq-len", seq_len_,
                   "override the model's sequence length (as plan --seq-len; default: the "
                   "model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxSeqLen));
  sub_->add_option("--micro-batch", micro_batch_,
                   "override the model's micro-batch size (as plan --micro-batch; default: the "
                   "model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxMicroBatch));
  sub_->add_option("--layers", layers_, "MoE transformer blocks to simulate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub_->add_option("--compute-efficiency", compute_efficiency_,
                   "share of the device's peak flop/s (for the model's compute_dtype) that "
                   "compute ops reach (default: the cluster device's compute_efficiency, 1 when "
                   "the file gives none)")
      ->check(finite_range(0.01, 1.0));
  sub_->add_option("--completion-tolerance", completion_tolerance_,
                   "a flow with at most this share of its bytes left may end up to this share of "
                   "its transfer time early, with a near-simultaneous one: routed A2As end pair "
                   "by pair, and this joins the ends into fewer rate refills (0: exact times)")
      ->capture_default_str()
      ->check(finite_range(0.0, 0.1));
  sub_->add_option("--fairness", fairness_,
                   "how concurrent collectives share a link: per-collective (each collective an "
                   "equal share) or per-flow (plain max-min over flows); default: the cluster "
                   "file's `fairness`, per-collective when it has none")
      ->check(CLI::IsMember({"per-collective", "per-flow"}));
  sub_->add_option("--routing", routing_,
                   "token routing of the A2As: uniform, or synthetic with locality (as `moecomm "
                   "place`; samples at home, or placed by NetMoE when the strategy says "
                   "placement=netmoe); auto: synthetic for netmoe, else uniform")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "uniform", "synthetic"}));
  sub_->add_option("--locality", locality_,
                   "synthetic routing: share of a sample's tokens on its preferred experts")
      ->capture_default_str()
      ->check(finite_range(0.0, 1.0));
  sub_->add_option("--trace", trace_,
                   "write a Chrome trace (open in Perfetto) to this file (default: the first 64 "
                   "ranks)");
  sub_->add_option("--svg", svg_,
                   "write an SVG timeline to this file: a row per rank and stream, named by what "
                   "the stream carries, op names on the bars, a legend and a time axis in ms "
                   "(default: every rank)");
  sub_->add_option("--ranks", ranks_,
                   "the ranks --svg and --trace show, in this order: ranks and ranges separated "
                   "by commas, e.g. 0-7,32");
  sub_->add_flag("--json", json_,
                 "print {iteration_ms, forward_ms, backward_ms, ops: {kind: {count, flops, "
                 "bytes, busy_ms_per_rank}}, busiest_links, flows, strategy, strategy_notes}");
}

int SimCommand::run(std::ostream& out, std::ostream& err) const {
  const ModelSetup setup = resolve_model_setup(model_, cluster_, parallel_, seq_len_, micro_batch_);
  sched::LayerSetup layer;
  layer.model = setup.model;
  layer.cluster = setup.cluster;
  const bool ep_given = core::parse_parallel_spec(parallel_, "--parallel").ep.has_value();
  const std::vector<std::string> notes =
      planned_knobs(setup, strategy_, ep_given, "--strategy", layer);
  layer.layers = layers_;
  const bool netmoe = layer.strategy.placement == sched::Placement::kNetMoe;
  if (netmoe && routing_ == "uniform") {
    throw Error("--routing",
                "placement=netmoe moves samples by their routing: use --routing "
                "synthetic (the default for netmoe), not uniform");
  }
  std::optional<RoutedDispatch> routed;
  if (routing_ == "synthetic" || (routing_ == "auto" && netmoe)) {
    place::SyntheticRoutingSpec spec;
    spec.locality = locality_;
    spec.layer_correlation = 0.9;
    ModelSetup packed = setup;  // Lina's packing may have moved the EP size
    packed.parallel = layer.parallel;
    routed = routed_dispatch(packed, spec, netmoe, "flow");
    layer.a2a_pair_bytes = routed->matrices;
  }
  if (!ranks_.empty() && trace_.empty() && svg_.empty())
    throw Error("--ranks", "selects the ranks that --svg and --trace show: give one of them");
  // Before the step is built and simulated, which can take seconds: a bad selection fails
  // at once.
  const std::vector<int> ranks =
      ranks_.empty() ? std::vector<int>{}
                     : sim::parse_rank_selection(ranks_, layer.parallel.world(), "--ranks");
  const auto start = std::chrono::steady_clock::now();
  const sched::Schedule schedule = sched::build_training_step(layer);
  const core::Topology topology(setup.cluster);
  sim::SimOptions options;
  if (compute_efficiency_ > 0) options.compute_efficiency = compute_efficiency_;
  options.completion_tolerance = completion_tolerance_;
  if (!fairness_.empty()) options.fairness = core::parse_fairness(fairness_, "--fairness");
  const sim::SimResult result = sim::simulate(schedule, topology, options);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!trace_.empty()) {
    sim::write_chrome_trace(schedule, result, trace_, {.ranks = ranks});
    err << "wrote Chrome trace " << trace_ << "\n";
  }
  if (!svg_.empty()) {
    const auto& p = layer.parallel;
    sim::SvgOptions svg;
    svg.ranks = ranks;
    svg.title = layer.strategy.name + ": " + setup.model.name + " on " + setup.cluster.name +
                ", dp=" + std::to_string(p.dp) + " tp=" + std::to_string(p.tp) +
                " ep=" + std::to_string(p.ep) + " esp=" + std::to_string(p.esp) +
                " pp=" + std::to_string(p.pp) + ", " + std::to_string(layers_) + " MoE layer(s)";
    sim::write_svg_timeline(schedule, result, svg_, svg);
    err << "wrote SVG timeline " << svg_ << "\n";
  }
  const sim::SimReport report = sim::make_report(schedule, result);
  nlohmann::json j = sim::report_to_json(report, result);
  if (json_) {
    j["strategy"] = sched::to_string(layer.strategy);
    j["strategy_notes"] = notes;
    j["model"] = setup.model.name;
    j["cluster"] = setup.cluster.name;
    j["ranks"] = schedule.world_size();
    j["schedule_ops"] = schedule.num_ops();
    j["wall_s"] = wall_s;
    if (routed) {
      j["routing"] = {{"source", "synthetic"},
                      {"locality", locality_},
                      {"placement", std::string(sched::to_string(layer.strategy.placement))},
                      {"dispatch_inter_node_MB", routed->inter_node_bytes / 1e6},
                      {"placement_solve_us", routed->placement_solve_us}};
    }
    out << dump_json(j) << "\n";
    return 0;
  }
  const auto& p = layer.parallel;
  char line[256];
  out << "strategy " << layer.strategy.name << " (" << sched::to_string(layer.strategy) << ")\n"
      << "model " << setup.model.name << " on " << setup.cluster.name << " ("
      << schedule.world_size() << " ranks), dp=" << p.dp << " tp=" << p.tp << " ep=" << p.ep
      << " esp=" << p.esp << " pp=" << p.pp << " cp=" << p.cp << ", " << layers_
      << " MoE layer(s)\n";
  for (const auto& n : notes) out << "  planned: " << n << "\n";
  if (routed) {
    std::snprintf(line, sizeof line,
                  "routing: synthetic (locality %.2g), samples %s: one dispatch sends %.1f MB "
                  "across nodes\n",
                  locality_, netmoe ? "placed by NetMoE" : "at home",
                  routed->inter_node_bytes / 1e6);
    out << line;
  } else {
    out << "routing: uniform\n";
  }
  std::snprintf(line, sizeof line,
                "iteration %.3f ms: forward %.3f ms, backward %.3f ms (simulated %d ops, %lld "
                "flows in %.2f s)\n",
                report.iteration_s * 1e3, report.forward_s * 1e3, report.backward_s * 1e3,
                schedule.num_ops(), static_cast<long long>(result.flows), wall_s);
  out << line;
  // Counts, flops and bytes add up every rank's ops; the busy time is one rank's (the mean).
  std::snprintf(line, sizeof line, "%-16s %16s %18s %16s %24s\n", "op kind", "ops (all ranks)",
                "GFLOP (all ranks)", "MB (all ranks)", "busy ms (mean per rank)");
  out << line;
  for (const auto& [kind, v] : j["ops"].items()) {
    std::snprintf(line, sizeof line, "%-16s %16lld %18.2f %16.2f %24.3f\n", kind.c_str(),
                  v["count"].get<long long>(), v["flops"].get<double>() / 1e9,
                  v["bytes"].get<double>() / 1e6, v["busy_ms_per_rank"].get<double>());
    out << line;
  }
  out << "busiest links:";
  int shown = 0;
  for (const auto& l : result.busiest_links) {
    if (shown++ == 4) break;
    std::snprintf(line, sizeof line, " %s %.1f MB (busy %.3f ms);", l.name.c_str(), l.bytes / 1e6,
                  l.busy_s * 1e3);
    out << line;
  }
  out << "\n";
  return 0;
}

}  // namespace moecomm::cli

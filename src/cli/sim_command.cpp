#include "cli/sim_command.h"

#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/flag_checks.h"
#include "cli/json_output.h"
#include "cli/sim_collective.h"
#include "core/error.h"
#include "core/model_setup.h"
#include "core/presets.h"
#include "plan/step_service.h"
#include "sim/sim_report.h"
#include "sim/trace_export.h"

namespace moecomm::cli {

SimCommand::SimCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "sim",
      "Build one training step (the micro-batches' forwards and backwards through the\n"
      "pipeline stages, the gradient sync once per step) for a strategy and run it in the\n"
      "flow-level simulator: links shared max-min fairly, every collective decomposed into\n"
      "flows by its algorithm.");
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
                   "compression) come from the planner's estimate of the method; "
                   "a2a_dtype=fp32|bf16|fp8 (or DISPATCH/COMBINE, e.g. fp8/bf16) prices the token "
                   "A2As' rows in that dtype (fp8: 1 byte a value plus an fp32 scale per 128)")
      ->capture_default_str();
  sub_->add_option("--seq-len", seq_len_,
                   "override the model's sequence length (as plan --seq-len; default: the "
                   "model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxSeqLen));
  sub_->add_option("--micro-batch", micro_batch_,
                   "override the model's micro-batch size (as plan --micro-batch; default: the "
                   "model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxMicroBatch));
  sub_->add_option("--layers", layers_,
                   "transformer blocks the step runs, over all pipeline stages (at most the "
                   "model's layers; split evenly, else the remainder on the first and last "
                   "stages; default: one per stage and virtual stage)")
      ->check(CLI::Range(1, int(core::kMaxLayers)));
  sub_->add_option("--micro-batches", micro_batches_,
                   "micro-batches per step (gradient accumulation, the pipeline's M; gradients "
                   "are synchronized once per step; default: the model's micro_batches, else 1)")
      ->check(CLI::Range(int64_t{1}, core::kMaxMicroBatch));
  sub_->add_option("--pp-schedule", pp_schedule_,
                   "pipeline schedule of the micro-batches: gpipe, 1f1b (the default) or "
                   "interleaved:V (V virtual stages per stage); the strategy knob pp_schedule")
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              sched::Strategy s;
              sched::parse_pp_schedule(s, v, "pp schedule");
              return std::string();
            } catch (const Error& e) {
              return std::string(e.what());
            }
          },
          "gpipe|1f1b|interleaved:V"));
  sub_->add_flag("--whole-step", whole_step_,
                 "the model's whole training step: every layer (unless --layers), the LM head and "
                 "loss on the last stage, and the optimizer (Adam, ZeRO by --zero) at the end");
  sub_->add_option("--zero", zero_,
                   "ZeRO stage of the data-parallel optimizer (0-3); the strategy knob zero")
      ->check(CLI::Range(0, 3));
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
  sub_->add_option("--collective", collective_,
                   "instead of a training step: one collective (alltoall, allreduce, allgather, "
                   "reducescatter) over --group, at every size of --sizes, printed as nccl-tests "
                   "prints it (size, time, algbw, busbw); only --cluster, --fairness, "
                   "--completion-tolerance and --json apply")
      ->check(CLI::IsMember({"alltoall", "allreduce", "allgather", "reducescatter"}));
  sub_->add_option("--sizes", sizes_,
                   "--collective's sizes LO:HI, doubling (nccl-tests -b LO -e HI -f 2), or one "
                   "size; K/M/G are powers of 1024 as in nccl-tests; the size is nccl-tests' "
                   "(AllGather: the output, ReduceScatter: the input, A2A: each rank's send "
                   "buffer)")
      ->capture_default_str();
  sub_->add_option("--group", group_,
                   "--collective's ranks: ranks and ranges separated by commas, e.g. 0-7 "
                   "(default: every rank of the cluster, as nccl-tests' job)");
  sub_->add_flag("--json", json_,
                 "print {iteration_ms, forward_ms, backward_ms, ops: {kind: {count, flops, "
                 "bytes, busy_ms_per_rank}}, busiest_links, flows, strategy, strategy_notes}");
}

int SimCommand::run_collective(std::ostream& out) const {
  for (const char* flag :
       {"--model", "--parallel", "--strategy", "--seq-len", "--micro-batch", "--layers",
        "--micro-batches", "--pp-schedule", "--whole-step", "--zero", "--compute-efficiency",
        "--routing", "--locality", "--trace", "--svg", "--ranks"}) {
    if (sub_->count(flag) > 0)
      throw Error(flag, "does not apply to --collective (a collective alone on --cluster)");
  }
  const core::Topology topology(
      core::load_cluster(cluster_.empty() ? core::kDefaultCluster : cluster_));
  std::vector<int> group;
  if (group_.empty()) {
    for (int r = 0; r < topology.world_size(); ++r) group.push_back(r);
  } else {
    group = sim::parse_rank_selection(group_, topology.world_size(), "--group");
  }
  const CollectiveSweep sweep =
      run_collective_sweep(topology, collective_, group, parse_size_sweep(sizes_, "--sizes"),
                           plan::step_sim_options(0, completion_tolerance_, fairness_));
  if (json_) {
    out << dump_json(collective_sweep_json(sweep)) << "\n";
  } else {
    print_collective_sweep(sweep, out);
  }
  return 0;
}

int SimCommand::run(std::ostream& out, std::ostream& err) const {
  if (!collective_.empty()) return run_collective(out);
  if (sub_->count("--sizes") > 0 || !group_.empty())
    throw Error(sub_->count("--sizes") > 0 ? "--sizes" : "--group", "applies only to --collective");
  plan::StepRequest request;
  request.setup = core::resolve_model_setup(model_, cluster_, parallel_, seq_len_, micro_batch_);
  request.strategy = strategy_;
  request.ep_given = core::parse_parallel_spec(parallel_, "--parallel").ep.has_value();
  request.layers = layers_;
  request.micro_batches = micro_batches_;
  request.pp_schedule = pp_schedule_;
  request.zero = zero_;
  request.whole_step = whole_step_;
  request.routing = plan::parse_step_routing(routing_, "--routing");
  request.locality = locality_;
  plan::PreparedStep prepared = plan::prepare_step(request);
  if (!ranks_.empty() && trace_.empty() && svg_.empty())
    throw Error("--ranks", "selects the ranks that --svg and --trace show: give one of them");
  // Before the step is built and simulated, which can take seconds: a bad selection fails
  // at once.
  const std::vector<int> ranks =
      ranks_.empty()
          ? std::vector<int>{}
          : sim::parse_rank_selection(ranks_, prepared.layer.parallel.world(), "--ranks");
  const plan::SimulatedStep step = plan::simulate_step(
      std::move(prepared),
      plan::step_sim_options(compute_efficiency_, completion_tolerance_, fairness_));
  const sched::Schedule& schedule = step.schedule;
  const sim::SimResult& result = step.result;
  const sim::SimReport& report = step.report;
  const sched::LayerSetup& layer = step.prepared.layer;
  const std::vector<std::string>& notes = step.prepared.notes;
  const auto& routed = step.prepared.routed;
  if (!trace_.empty()) {
    sim::write_chrome_trace(schedule, result, trace_, {.ranks = ranks});
    err << "wrote Chrome trace " << trace_ << "\n";
  }
  if (!svg_.empty()) {
    const auto& p = layer.parallel;
    sim::SvgOptions svg;
    svg.ranks = ranks;
    svg.title = layer.strategy.name + ": " + layer.model.name + " on " + layer.cluster.name +
                ", dp=" + std::to_string(p.dp) + " tp=" + std::to_string(p.tp) +
                " ep=" + std::to_string(p.ep) + " esp=" + std::to_string(p.esp) +
                " pp=" + std::to_string(p.pp) + ", " + std::to_string(layer.layers) +
                " layer(s), " + std::to_string(layer.micro_batches) + " micro-batch(es)";
    sim::write_svg_timeline(schedule, result, svg_, svg);
    err << "wrote SVG timeline " << svg_ << "\n";
  }
  const nlohmann::json j = plan::step_json(step);
  if (json_) {
    out << dump_json(j) << "\n";
    return 0;
  }
  const auto& p = layer.parallel;
  char line[256];
  out << "strategy " << layer.strategy.name << " (" << sched::to_string(layer.strategy) << ")\n"
      << "model " << layer.model.name << " on " << layer.cluster.name << " ("
      << schedule.world_size() << " ranks), dp=" << p.dp << " tp=" << p.tp << " ep=" << p.ep
      << " esp=" << p.esp << " pp=" << p.pp << " cp=" << p.cp << ", " << layer.layers
      << " layer(s) of " << layer.model.layers << ", " << layer.micro_batches
      << " micro-batch(es), pp_schedule=" << sched::pp_schedule_name(layer.strategy) << "\n";
  for (const auto& n : notes) out << "  planned: " << n << "\n";
  if (routed) {
    std::snprintf(
        line, sizeof line,
        "routing: synthetic (locality %.2g), samples %s: one dispatch sends %.1f MB "
        "across nodes\n",
        locality_,
        layer.strategy.placement == sched::Placement::kNetMoe ? "placed by NetMoE" : "at home",
        routed->inter_node_bytes / 1e6);
    out << line;
  } else {
    out << "routing: uniform\n";
  }
  std::snprintf(line, sizeof line,
                "iteration %.3f ms: forward %.3f ms, backward %.3f ms (simulated %d ops, %lld "
                "flows in %.2f s)\n",
                report.iteration_s * 1e3, report.forward_s * 1e3, report.backward_s * 1e3,
                schedule.num_ops(), static_cast<long long>(result.flows), step.wall_s);
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

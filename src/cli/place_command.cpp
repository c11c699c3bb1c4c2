#include "cli/place_command.h"

#include <cstdio>
#include <ostream>

#include "cli/json_output.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/topology.h"
#include "place/counts_file.h"
#include "place/routing_predictor.h"
#include "place/routing_trace.h"
#include "place/sample_placer.h"
#include "place/trace_evaluation.h"

namespace moecomm::cli {

using nlohmann::json;

PlaceCommand::PlaceCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "place",
      "NetMoE sample placement: move samples between devices at every MoE layer so that the\n"
      "gather A2A of layer l and the scatter of layer l+1 cross fewer slow links (two\n"
      "stages, each an exact assignment). Input: a routing trace, synthetic routing (the\n"
      "default) or one instance as counts.");
  auto* input = sub_->add_option_group("input", "where the routing comes from (one of)");
  input->add_option("--trace", trace_, "routing trace file (format: README, 'Routing trace')")
      ->check(CLI::ExistingFile);
  input->add_flag("--synthetic", synthetic_,
                  "generate routing with locality (the default; flags below)");
  input
      ->add_option("--counts", counts_,
                   "one instance: {\"num\": samples x experts, \"expert_device\": [...], "
                   "\"devices_per_node\": G}")
      ->check(CLI::ExistingFile);
  input->require_option(0, 1);
  sub_->add_option("--cluster", cluster_, "cluster preset or JSON file")->capture_default_str();
  sub_->add_option("--model", model_,
                   "model preset or JSON file: hidden size and dtype give "
                   "bytes per token; seq_len, top_k, layers the synthetic "
                   "shapes")
      ->capture_default_str();
  sub_->add_option("--solver", solver_, "assignment solver")
      ->capture_default_str()
      ->check(CLI::IsMember({"flow", "km", "ilp", "lemon-ns", "lemon-cs", "lemon-cap"}));
  sub_->add_flag("--json", json_, "print one JSON object instead of the table");
  const std::string syn = "Synthetic routing";
  samples_opt_ =
      sub_->add_option("--samples", spec_.samples, "samples (default: 4 per device, NetMoE's I/J)")
          ->group(syn)
          ->check(CLI::Range(1, 1 << 20));
  tokens_opt_ = sub_->add_option("--tokens", spec_.tokens, "tokens per sample (default: seq_len)")
                    ->group(syn)
                    ->check(CLI::Range(1, 1 << 20));
  experts_opt_ = sub_->add_option("--experts", spec_.experts,
                                  "experts (default: 2 per device, NetMoE's E = 2J)")
                     ->group(syn)
                     ->check(CLI::Range(1, 1000000));
  top_k_opt_ = sub_->add_option("--top-k", spec_.top_k, "experts per token (default: model's)")
                   ->group(syn)
                   ->check(CLI::Range(1, 1000000));
  sub_->add_option("--layers", spec_.layers, "MoE layers")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  // Defaults: strong per-sample locality, as NetMoE (Sec. 3.1) and the works it cites
  // observe; the predictor learns from 7 of 8 iterations.
  spec_.iterations = 8;
  spec_.locality = 0.9;
  spec_.layer_correlation = 0.9;
  sub_->add_option("--iterations", spec_.iterations,
                   "iterations (the predictor learns from the earlier ones)")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub_->add_option("--locality", spec_.locality,
                   "share of a sample's tokens on its preferred experts")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub_->add_option("--preferred", spec_.preferred, "preferred experts per sample and layer")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--skew", spec_.skew, "Zipf exponent of expert popularity (0 = uniform)")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  sub_->add_option("--layer-correlation", spec_.layer_correlation,
                   "chance a sample's preference carries to the next layer")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub_->add_option("--seed", spec_.seed, "random seed")->group(syn)->capture_default_str();
  sub_->add_option("--write-trace", write_trace_, "also write the routing used to this trace file")
      ->group(syn);
  sub_->add_option("--predictor-decay", decay_,
                   "weight the routing statistics keep per iteration, in [0, 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
}

int PlaceCommand::run(std::ostream& out, std::ostream& err) const {
  if (!counts_.empty()) return run_counts(out);
  return run_trace(out, err);
}

namespace {

double bytes_per_token(const core::ModelConfig& model) {
  return static_cast<double>(model.hidden) * model.dtype_bytes;
}

std::string pct(double after, double before) {
  if (before == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * (after - before) / before);
  return buf;
}

void row(std::ostream& out, const char* name, double before, double after, double oracle) {
  char line[160];
  std::snprintf(line, sizeof line, "%-22s %12.2f %12.2f %9s %12.2f\n", name, before, after,
                pct(after, before).c_str(), oracle);
  out << line;
}

// A two-level topology for a counts instance: the cluster's outermost link between nodes,
// its innermost between the devices of a node.
core::Topology counts_topology(const core::Cluster& cluster, const place::DeviceGrid& grid) {
  core::Cluster c = cluster;
  core::Level node = cluster.levels.front(), device = cluster.levels.back();
  node.count = grid.nodes;
  device.count = grid.devices_per_node;
  c.levels = {node, device};
  if (cluster.levels.size() == 1) c.levels.front().name = "node";
  return core::Topology(c);
}

}  // namespace

int PlaceCommand::run_counts(std::ostream& out) const {
  const place::CountsInstance in = place::read_counts_file(counts_);
  const core::ModelConfig model = core::load_model(model_);
  const core::Topology topo = counts_topology(core::load_cluster(cluster_), in.grid);
  const double bpt = bytes_per_token(model);
  place::SamplePlacer placer(solver_);
  const place::SamplePlacement p = placer.place(in.num, in.expert_device, in.grid);
  const place::A2ATraffic before =
      place::a2a_traffic(in.num, in.sample_device, in.expert_device, topo);
  const place::A2ATraffic after =
      place::a2a_traffic(in.num, p.sample_device, in.expert_device, topo);
  int across_nodes = 0, across_devices = 0;
  for (int i = 0; i < in.num.samples; ++i) {
    across_nodes += in.grid.node_of(in.sample_device[i]) != in.grid.node_of(p.sample_device[i]);
    across_devices += in.sample_device[i] != p.sample_device[i];
  }
  const double t_before = place::a2a_time(before, topo, bpt) * 1e3;
  const double t_after = place::a2a_time(after, topo, bpt) * 1e3;
  if (json_) {
    json j = {
        {"solver", solver_},
        {"nodes", in.grid.nodes},
        {"devices_per_node", in.grid.devices_per_node},
        {"sample_device", p.sample_device},
        {"inter_node_tokens", {{"before", before.inter_node()}, {"after", after.inter_node()}}},
        {"intra_node_tokens", {{"before", before.intra_node()}, {"after", after.intra_node()}}},
        {"a2a_ms", {{"before", t_before}, {"after", t_after}}},
        {"moved_across_nodes", double(across_nodes) / in.num.samples},
        {"moved_across_devices", double(across_devices) / in.num.samples},
        {"solve_us", p.solve_us}};
    out << dump_json(j) << "\n";
    return 0;
  }
  out << "NetMoE placement of " << in.num.samples << " samples on " << in.grid.nodes << " nodes x "
      << in.grid.devices_per_node << " devices (" << counts_ << "), solver " << solver_ << "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-22s %12s %12s %9s\n", "all samples, one A2A", "before",
                "after", "change");
  out << line;
  for (auto [name, b, a] :
       {std::tuple{"inter-node tokens", before.inter_node(), after.inter_node()},
        std::tuple{"intra-node tokens", before.intra_node(), after.intra_node()}}) {
    std::snprintf(line, sizeof line, "%-22s %12lld %12lld %9s\n", name, (long long)b, (long long)a,
                  pct(double(a), double(b)).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "%-22s %12.4f %12.4f %9s\n", "A2A ms (Eq. 1)", t_before, t_after,
                pct(t_after, t_before).c_str());
  out << line;
  std::snprintf(line, sizeof line,
                "samples moved: %.1f%% across nodes, %.1f%% across devices; solve %.1f us\n",
                100.0 * across_nodes / in.num.samples, 100.0 * across_devices / in.num.samples,
                p.solve_us);
  out << line;
  return 0;
}

namespace {

json level_json(const place::A2ATraffic& t, double bpt) {
  return {{"inter_node_tokens", t.inter_node()},
          {"intra_node_tokens", t.intra_node()},
          {"same_device_tokens", t.same_device},
          {"inter_node_MB", t.inter_node() * bpt / 1e6},
          {"intra_node_MB", t.intra_node() * bpt / 1e6}};
}

json pair_json(const place::PairEvaluation& p, double bpt) {
  return {{"iteration", p.iteration},
          {"layer", p.layer},
          {"before", level_json(p.before, bpt)},
          {"after", level_json(p.after, bpt)},
          {"oracle", level_json(p.oracle, bpt)},
          {"a2a_ms", {{"before", p.time_before_s * 1e3}, {"after", p.time_after_s * 1e3}}},
          {"moved_across_nodes", p.moved_across_nodes},
          {"moved_across_devices", p.moved_across_devices},
          {"solve_us", p.solve_us},
          {"wait_us", p.wait_us},
          {"predicted", p.predicted},
          {"prediction_error", p.prediction_error}};
}

json summary_json(const place::TraceSummary& s, double bpt) {
  auto mb = [bpt](double tokens) { return tokens * bpt / 1e6; };
  return {{"pairs", s.pairs},
          {"inter_node_MB",
           {{"before", mb(s.inter_before)},
            {"after", mb(s.inter_after)},
            {"oracle", mb(s.inter_oracle)}}},
          {"intra_node_MB",
           {{"before", mb(s.intra_before)},
            {"after", mb(s.intra_after)},
            {"oracle", mb(s.intra_oracle)}}},
          {"inter_node_tokens",
           {{"before", s.inter_before}, {"after", s.inter_after}, {"oracle", s.inter_oracle}}},
          {"intra_node_tokens",
           {{"before", s.intra_before}, {"after", s.intra_after}, {"oracle", s.intra_oracle}}},
          {"inter_node_reduction", s.inter_before > 0 ? 1 - s.inter_after / s.inter_before : 0.0},
          {"a2a_ms", {{"before", s.time_before_s * 1e3}, {"after", s.time_after_s * 1e3}}},
          {"moved_across_nodes", s.moved_across_nodes},
          {"moved_across_devices", s.moved_across_devices},
          {"solve_us", {{"mean", s.solve_us_mean}, {"max", s.solve_us_max}}},
          {"wait_us_mean", s.wait_us_mean},
          {"predicted_pairs", s.predicted_pairs},
          {"prediction_error", s.prediction_error},
          {"oracle_share", s.oracle_share}};
}

void print_summary(std::ostream& out, const place::TraceSummary& s, double bpt) {
  auto mb = [bpt](double tokens) { return tokens * bpt / 1e6; };
  char line[200];
  // A pair is gather(l) + scatter(l+1); its bytes are every device's together.
  std::snprintf(line, sizeof line, "%-22s %12s %12s %9s %12s\n", "mean pair, all devices", "before",
                "after", "change", "oracle");
  out << line;
  row(out, "inter-node MB", mb(s.inter_before), mb(s.inter_after), mb(s.inter_oracle));
  row(out, "intra-node MB", mb(s.intra_before), mb(s.intra_after), mb(s.intra_oracle));
  std::snprintf(line, sizeof line, "%-22s %12.3f %12.3f %9s\n", "A2A ms (Eq. 1)",
                s.time_before_s * 1e3, s.time_after_s * 1e3,
                pct(s.time_after_s, s.time_before_s).c_str());
  out << line;
  std::snprintf(line, sizeof line,
                "samples moved: %.1f%% across nodes, %.1f%% across devices (NetMoE Table 5)\n",
                100 * s.moved_across_nodes, 100 * s.moved_across_devices);
  out << line;
  std::snprintf(line, sizeof line,
                "solve: mean %.1f us, max %.1f us on the background thread; the gather waited "
                "%.1f us on average\n",
                s.solve_us_mean, s.solve_us_max, s.wait_us_mean);
  out << line;
  if (s.predicted_pairs == 0) {
    out << "prediction: no earlier iteration to learn layer l+1's routing from; the scatter "
           "term was left out (give more --iterations)\n";
    return;
  }
  std::snprintf(line, sizeof line,
                "prediction of layer l+1's routing: %.1f%% L1 error on the %d of %d pairs with "
                "statistics; the placement reached %.1f%% of the inter-node reduction an "
                "oracle that knew it would\n",
                100 * s.prediction_error, s.predicted_pairs, s.pairs, 100 * s.oracle_share);
  out << line;
}

}  // namespace

int PlaceCommand::run_trace(std::ostream& out, std::ostream& err) const {
  const core::Cluster cluster = core::load_cluster(cluster_);
  const core::ModelConfig model = core::load_model(model_);
  const core::Topology topo(cluster);
  const place::DeviceGrid grid = place::DeviceGrid::of(topo);
  place::RoutingTrace trace;
  std::string source;
  if (!trace_.empty()) {
    trace = place::read_routing_trace(trace_);
    source = "trace " + trace_;
  } else {
    place::SyntheticRoutingSpec spec = spec_;
    if (!samples_opt_->count()) spec.samples = samples_per_device_ * grid.devices();
    if (!experts_opt_->count()) spec.experts = experts_per_device_ * grid.devices();
    if (!tokens_opt_->count()) spec.tokens = static_cast<int>(model.seq_len);
    if (!top_k_opt_->count()) spec.top_k = static_cast<int>(model.top_k);
    // The predictor's limits, before generating what it could not learn from.
    place::validate(spec);
    place::check_predictor_size(spec.layers, spec.experts,
                                int64_t{spec.layers - 1} * (spec.iterations - 1));
    trace = place::generate_routing_trace(spec);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "synthetic routing (locality %.2g, %d preferred, skew %.2g, layer correlation "
                  "%.2g, seed %llu)",
                  spec.locality, spec.preferred, spec.skew, spec.layer_correlation,
                  static_cast<unsigned long long>(spec.seed));
    source = buf;
    if (!write_trace_.empty()) {
      place::write_routing_trace(trace, write_trace_);
      err << "wrote the routing trace to " << write_trace_ << "\n";
    }
  }
  if (trace.layers() < 2)
    throw Error(source, "needs at least 2 layers (a gather and the next scatter)");
  const std::vector<int> expert_device = place::expert_blocks(trace.experts, grid.devices());
  place::TraceEvaluationOptions options;
  options.solver = solver_;
  options.bytes_per_token = bytes_per_token(model);
  options.predictor_decay = decay_;
  // Progress on stderr for long replays (tens of millions of routed tokens).
  const double ids = double(trace.samples()) * trace.tokens() * trace.top_k * trace.layers() *
                     trace.iterations.size();
  if (ids > 5e7) {
    options.progress = [&err](int done, int total) {
      err << "placed iteration " << done << "/" << total << "\n";
    };
  }
  const auto pairs = place::evaluate_trace(trace, topo, expert_device, options);
  const place::TraceSummary summary = place::summarize(pairs);
  const double bpt = options.bytes_per_token;
  if (json_) {
    json j = {{"source", source},           {"cluster", cluster.name},
              {"model", model.name},        {"solver", solver_},
              {"nodes", grid.nodes},        {"devices_per_node", grid.devices_per_node},
              {"samples", trace.samples()}, {"tokens", trace.tokens()},
              {"experts", trace.experts},   {"top_k", trace.top_k},
              {"layers", trace.layers()},   {"iterations", trace.iterations.size()},
              {"bytes_per_token", bpt},     {"summary", summary_json(summary, bpt)},
              {"pairs", json::array()}};
    for (const auto& p : pairs) j["pairs"].push_back(pair_json(p, bpt));
    out << dump_json(j) << "\n";
    return 0;
  }
  out << "NetMoE sample placement, " << source << "\n"
      << trace.samples() << " samples x " << trace.tokens() << " tokens, " << trace.experts
      << " experts (top-" << trace.top_k << ", " << trace.experts / double(grid.devices())
      << " per device), " << trace.layers() << " layers x " << trace.iterations.size()
      << " iterations\n"
      << "cluster " << cluster.name << ": " << grid.nodes << " nodes x " << grid.devices_per_node
      << " devices; model " << model.name << ": " << bpt << " bytes per token; solver " << solver_
      << "\n"
      << "each pair is gather(l) + scatter(l+1): " << summary.pairs << " pairs\n";
  print_summary(out, summary, bpt);
  return 0;
}

}  // namespace moecomm::cli

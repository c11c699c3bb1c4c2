#include "cli/place_command.h"

#include <cstdio>
#include <optional>
#include <ostream>
#include <tuple>

#include "cli/flag_checks.h"
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
  cluster_opt_ = sub_->add_option("--cluster", cluster_,
                                  "cluster preset or JSON file: the devices and their links "
                                  "(a trace's own layout comes first, with this preset's "
                                  "links; a counts file's layout must match it)")
                     ->capture_default_str();
  model_opt_ = sub_->add_option("--model", model_,
                                "model preset or JSON file: hidden size and dtype give bytes "
                                "per token (a trace's own model comes first); seq_len, top_k "
                                "the synthetic shapes")
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
      ->check(finite_range(0.0, 1.0));
  sub_->add_option("--preferred", spec_.preferred, "preferred experts per sample and layer")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--skew", spec_.skew, "Zipf exponent of expert popularity (0 = uniform)")
      ->group(syn)
      ->capture_default_str()
      ->check(finite_range(0.0, 10.0));
  sub_->add_option("--layer-correlation", spec_.layer_correlation,
                   "chance a sample's preference carries to the next layer")
      ->group(syn)
      ->capture_default_str()
      ->check(finite_range(0.0, 1.0));
  sub_->add_option("--router-groups", spec_.router_groups,
                   "node-limited routing: experts in this many equal groups (the model key "
                   "router_groups; with the nodes' count, a token's groups are nodes)")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--router-group-top-k", spec_.router_group_top_k,
                   "node-limited routing: each token's experts within this many groups (0: "
                   "any)")
      ->group(syn)
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  sub_->add_option("--seed", spec_.seed, "random seed")->group(syn)->capture_default_str();
  sub_->add_option("--write-trace", write_trace_, "also write the routing used to this trace file")
      ->group(syn);
  sub_->add_option("--predictor-decay", decay_,
                   "weight the routing statistics keep per iteration, in [0, 1)")
      ->capture_default_str()
      ->check(finite_range(0.0, 0.999));
}

int PlaceCommand::run(std::ostream& out, std::ostream& err) const {
  if (!counts_.empty()) return run_counts(out);
  return run_trace(out, err);
}

namespace {

double bytes_per_token(const core::ModelConfig& model) {
  return static_cast<double>(model.hidden) * model.dtype_bytes;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "hidden 64 x 4 bytes = 256 bytes per token"
std::string bytes_text(int64_t hidden, int64_t dtype_bytes) {
  return "hidden " + std::to_string(hidden) + " x " + std::to_string(dtype_bytes) +
         " bytes = " + num(static_cast<double>(hidden) * dtype_bytes) + " bytes per token";
}

std::string grid_text(const place::DeviceGrid& g) {
  return std::to_string(g.nodes) + (g.nodes == 1 ? " node x " : " nodes x ") +
         std::to_string(g.devices_per_node) + (g.devices_per_node == 1 ? " device" : " devices");
}

// "node 25 GB/s 10 us, gpu 200 GB/s 3 us": each level's link, outermost first.
std::string links_text(const core::Cluster& c) {
  std::string text;
  for (const core::Level& l : c.levels) {
    if (!text.empty()) text += ", ";
    text += l.name + " " + num(l.bandwidth / 1e9) + " GB/s " + num(l.latency * 1e6) + " us";
  }
  return text;
}

std::string layout_text(const place::TraceLayout& l) {
  std::string text =
      std::to_string(l.ranks) + " ranks, " + std::to_string(l.ranks_per_node) + " per node";
  if (l.tp > 1) text += ", TP groups of " + std::to_string(l.tp) + " (one device each)";
  return text;
}

place::DeviceGrid grid_of(const core::Cluster& cluster) {
  return place::DeviceGrid::of(core::Topology(cluster));
}

// `nodes` x `per_node` devices priced with the links of `links`: its outermost level's
// between nodes and its innermost level's within a node. A counts file or a trace fixes the
// layout; a cluster preset gives what its links cost.
core::Cluster reshaped(const core::Cluster& links, int nodes, int per_node) {
  core::Cluster c = links;
  core::Level node = links.levels.front(), device = links.levels.back();
  node.count = nodes;
  device.count = per_node;
  if (links.levels.size() == 1) node.name = "node";
  c.levels = {node, device};
  return c;
}

std::string pct(double after, double before) {
  if (before == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * (after - before) / before);
  return buf;
}

void row(std::ostream& out, const char* name, double before, double after, double oracle) {
  char line[160];
  std::snprintf(line, sizeof line, "%-22s %12.3f %12.3f %9s %12.3f\n", name, before, after,
                pct(after, before).c_str(), oracle);
  out << line;
}

}  // namespace

// The counts file fixes the layout (its device ids refer to it): --cluster gives the links
// only, and when given must have the same layout, so that one layout prices the instance.
int PlaceCommand::run_counts(std::ostream& out) const {
  const place::CountsInstance in = place::read_counts_file(counts_);
  const core::ModelConfig model = core::load_model(model_);
  const core::Cluster links = core::load_cluster(cluster_);
  const bool cluster_given = cluster_opt_->count() > 0;
  if (cluster_given) {
    const place::DeviceGrid given = grid_of(links);
    if (given.nodes != in.grid.nodes || given.devices_per_node != in.grid.devices_per_node) {
      const bool per_node = given.devices_per_node != in.grid.devices_per_node;
      throw Error(counts_ + (per_node ? ": devices_per_node" : ": devices"),
                  "the instance's layout, " + grid_text(in.grid) + ", disagrees with --cluster " +
                      cluster_ + " (" + grid_text(given) + "): pass a --cluster of " +
                      grid_text(in.grid) +
                      ", or leave --cluster out to price this layout with the default "
                      "cluster's links");
    }
  }
  // A cluster of the same layout prices with all its levels; the default lends its links.
  const core::Cluster cluster =
      cluster_given ? links : reshaped(links, in.grid.nodes, in.grid.devices_per_node);
  const core::Topology topo(cluster);
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
  const bool model_given = model_opt_->count() > 0;
  if (json_) {
    json j = {
        {"solver", solver_},
        {"nodes", in.grid.nodes},
        {"devices_per_node", in.grid.devices_per_node},
        {"layout_from", "counts"},
        {"cluster", links.name},
        {"links_from", cluster_given ? "--cluster" : "default"},
        {"model", model.name},
        {"model_from", model_given ? "--model" : "default"},
        {"bytes_per_token", bpt},
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
  out << "NetMoE placement of " << in.num.samples << " samples on " << grid_text(in.grid)
      << " (the layout of " << counts_ << "), solver " << solver_ << "\n"
      << "links of cluster " << links.name
      << (cluster_given ? " (--cluster)" : " (the default; pass --cluster of the same layout)")
      << ": " << links_text(cluster) << "\n"
      << "model " << model.name << (model_given ? " (--model)" : " (the default; pass --model)")
      << ": " << bytes_text(model.hidden, model.dtype_bytes) << "\n";
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

// A trace's own model and layout, unless --model or --cluster says otherwise.
PlaceCommand::TraceInputs PlaceCommand::recorded_inputs() const {
  TraceInputs in;
  in.trace = place::read_routing_trace(trace_);
  in.source = "trace " + trace_;
  const std::optional<place::TraceModel>& recorded_model = in.trace.model;
  const bool model_given = model_opt_->count() > 0;
  if (model_given || !recorded_model) {
    const core::ModelConfig m = core::load_model(model_);
    in.model_name = m.name;
    in.bytes_per_token = bytes_per_token(m);
    in.model_from = model_given ? "--model" : "default";
    std::string note =
        "model " + m.name +
        (model_given ? " (--model)"
                     : " (the default: the trace " + trace_ + " records no model; pass --model)") +
        ": " + bytes_text(m.hidden, m.dtype_bytes);
    if (recorded_model)
      note += "; the trace records " + recorded_model->name + ", " +
              num(recorded_model->bytes_per_token()) + " bytes per token";
    in.notes.push_back(note);
  } else {
    in.model_name = recorded_model->name;
    in.bytes_per_token = recorded_model->bytes_per_token();
    in.model_from = "trace";
    in.notes.push_back("model shape from the trace " + trace_ + ": " + recorded_model->name + ", " +
                       bytes_text(recorded_model->hidden, recorded_model->dtype_bytes) +
                       " (--model overrides)");
  }
  const std::optional<place::TraceLayout>& recorded_layout = in.trace.layout;
  const core::Cluster cluster = core::load_cluster(cluster_);
  const bool cluster_given = cluster_opt_->count() > 0;
  std::string whose;  // the cluster the samples must fill, in the error below
  if (cluster_given || !recorded_layout) {
    in.cluster = cluster;
    in.layout_from = cluster_given ? "--cluster" : "default";
    whose = cluster_given
                ? "--cluster " + cluster_
                : "the default cluster " + cluster.name + " (the trace records no layout)";
    std::string note = "cluster " + cluster.name +
                       (cluster_given ? " (--cluster)"
                                      : " (the default: the trace " + trace_ +
                                            " records no layout; pass --cluster)") +
                       ": " + grid_text(grid_of(cluster));
    if (recorded_layout) note += "; the trace was recorded on " + layout_text(*recorded_layout);
    in.notes.push_back(note);
  } else {
    const place::TraceLayout& l = *recorded_layout;
    if (l.ranks_per_node % l.tp != 0)
      throw Error(trace_ + ": layout.tp",
                  "TP groups of " + std::to_string(l.tp) + " ranks span nodes of " +
                      std::to_string(l.ranks_per_node) +
                      " ranks, so no device layout follows: pass --cluster");
    in.cluster = reshaped(cluster, l.ranks / l.ranks_per_node, l.ranks_per_node / l.tp);
    in.layout_from = "trace";
    whose = "the trace's layout";
    in.notes.push_back("layout from the trace " + trace_ + ": " + grid_text(grid_of(in.cluster)) +
                       ", as it was recorded (" + layout_text(l) + "; --cluster overrides)");
    in.notes.push_back("links of cluster " + cluster.name +
                       " (the default; pass --cluster for others): " + links_text(in.cluster));
  }
  const int devices = grid_of(in.cluster).devices();
  if (in.trace.samples() < devices)
    throw Error(trace_, std::to_string(in.trace.samples()) + " samples cannot fill the " +
                            std::to_string(devices) + " devices of " + whose +
                            ": pass --cluster with at most " + std::to_string(in.trace.samples()) +
                            " devices");
  return in;
}

PlaceCommand::TraceInputs PlaceCommand::synthetic_inputs(std::ostream& err) const {
  TraceInputs in;
  const core::ModelConfig model = core::load_model(model_);
  in.cluster = core::load_cluster(cluster_);
  in.model_name = model.name;
  in.bytes_per_token = bytes_per_token(model);
  in.model_from = model_opt_->count() ? "--model" : "default";
  in.layout_from = cluster_opt_->count() ? "--cluster" : "default";
  const place::DeviceGrid grid = grid_of(in.cluster);
  in.notes.push_back("model " + model.name +
                     (model_opt_->count() ? " (--model)" : " (the default)") + ": " +
                     bytes_text(model.hidden, model.dtype_bytes));
  in.notes.push_back("cluster " + in.cluster.name +
                     (cluster_opt_->count() ? " (--cluster)" : " (the default)") + ": " +
                     grid_text(grid) + "; links " + links_text(in.cluster));
  place::SyntheticRoutingSpec spec = spec_;
  if (!samples_opt_->count()) spec.samples = samples_per_device_ * grid.devices();
  if (!experts_opt_->count()) spec.experts = experts_per_device_ * grid.devices();
  if (!tokens_opt_->count()) spec.tokens = static_cast<int>(model.seq_len);
  if (!top_k_opt_->count()) spec.top_k = static_cast<int>(model.top_k);
  if (spec.samples < grid.devices())
    throw Error("--samples", std::to_string(spec.samples) + " samples cannot fill the " +
                                 std::to_string(grid.devices()) + " devices of cluster " +
                                 in.cluster.name + ": give at least " +
                                 std::to_string(grid.devices()) + ", or a --cluster with at most " +
                                 std::to_string(spec.samples) + " devices");
  // The predictor's limits, before generating what it could not learn from.
  place::validate(spec);
  place::check_predictor_size(spec.layers, spec.experts,
                              int64_t{spec.layers - 1} * (spec.iterations - 1));
  in.trace = place::generate_routing_trace(spec);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "synthetic routing (locality %.2g, %d preferred, skew %.2g, layer correlation "
                "%.2g, seed %llu)",
                spec.locality, spec.preferred, spec.skew, spec.layer_correlation,
                static_cast<unsigned long long>(spec.seed));
  in.source = buf;
  if (!write_trace_.empty()) {
    // The shape and layout it was priced with, so that `place --trace` reads it the same way.
    place::RoutingTrace written = in.trace;
    place::TraceModel m;
    m.name = model.name;
    m.hidden = model.hidden;
    m.ffn_hidden = model.ffn_hidden;
    m.ffn_type = model.ffn_type;
    m.dtype_bytes = model.dtype_bytes;
    written.model = m;
    place::TraceLayout layout;
    layout.ranks = grid.devices();
    layout.ranks_per_node = grid.devices_per_node;
    written.layout = layout;
    place::write_routing_trace(written, write_trace_);
    err << "wrote the routing trace to " << write_trace_ << "\n";
  }
  return in;
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
  const TraceInputs in = trace_.empty() ? synthetic_inputs(err) : recorded_inputs();
  const place::RoutingTrace& trace = in.trace;
  if (trace.layers() < 2)
    throw Error(in.source, "needs at least 2 layers (a gather and the next scatter)");
  const core::Topology topo(in.cluster);
  const place::DeviceGrid grid = place::DeviceGrid::of(topo);
  const std::vector<int> expert_device = place::expert_blocks(trace.experts, grid.devices());
  place::TraceEvaluationOptions options;
  options.solver = solver_;
  options.bytes_per_token = in.bytes_per_token;
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
    json j = {{"source", in.source},           {"cluster", in.cluster.name},
              {"layout_from", in.layout_from}, {"model", in.model_name},
              {"model_from", in.model_from},   {"solver", solver_},
              {"nodes", grid.nodes},           {"devices_per_node", grid.devices_per_node},
              {"samples", trace.samples()},    {"tokens", trace.tokens()},
              {"experts", trace.experts},      {"top_k", trace.top_k},
              {"layers", trace.layers()},      {"iterations", trace.iterations.size()},
              {"bytes_per_token", bpt},        {"summary", summary_json(summary, bpt)},
              {"pairs", json::array()}};
    for (const auto& p : pairs) j["pairs"].push_back(pair_json(p, bpt));
    out << dump_json(j) << "\n";
    return 0;
  }
  out << "NetMoE sample placement, " << in.source << "\n"
      << trace.samples() << " samples x " << trace.tokens() << " tokens, " << trace.experts
      << " experts (top-" << trace.top_k << ", " << trace.experts / double(grid.devices())
      << " per device), " << trace.layers() << " layers x " << trace.iterations.size()
      << " iterations\n";
  for (const std::string& note : in.notes) out << note << "\n";
  out << "solver " << solver_ << "; each pair is gather(l) + scatter(l+1): " << summary.pairs
      << " pairs\n";
  print_summary(out, summary, bpt);
  return 0;
}

}  // namespace moecomm::cli

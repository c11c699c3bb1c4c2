#include "cli/infer_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/presets.h"
#include "infer/path_profile.h"
#include "infer/popularity_estimator.h"
#include "infer/replication_planner.h"
#include "nn/moe_layer_factory.h"
#include "nn/tensor.h"
#include "place/routing_trace.h"
#include "place/synthetic_routing.h"
#include "rt/comm_pool.h"
#include "rt/mpi_base.h"
#include "rt/replicated_moe.h"

namespace moecomm::cli {

using nlohmann::json;

namespace {

const CLI::Validator kFinite(
    [](std::string& text) {
      try {
        if (std::isfinite(std::stod(text))) return std::string();
      } catch (const std::exception&) {
      }
      return "'" + text + "' is not a finite number";
    },
    "FINITE");

// Variants, in report order (Lina Sec. 7.3.1's columns).
enum Variant { kBaseline, kNoEstimation, kNoFineTuning, kLina, kIdeal, kVariants };
constexpr const char* kNames[kVariants] = {"baseline", "lina_no_estimation", "lina_no_fine_tuning",
                                           "lina", "ideal"};
constexpr const char* kLabels[kVariants] = {"baseline", "Lina w/o estimation",
                                            "Lina w/o fine-tuning", "Lina", "ideal"};

constexpr double kMaxInferGB = 4;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The synthetic trace's defaults: 8 MoE layers, 48 iterations of 8 samples x 128 tokens
// (36 profile, 12 evaluated batches of 1024 tokens), Zipf popularity with exponent 1.
place::SyntheticRoutingSpec default_synthetic() {
  place::SyntheticRoutingSpec s;
  s.samples = 8;
  s.tokens = 128;
  s.layers = 8;
  s.iterations = 48;
  s.skew = 1.0;
  s.locality = 0.5;
  s.layer_correlation = 0.8;
  s.preferred = 2;
  s.seed = 1;
  return s;
}

// "skew=1.2,locality=0.5,correlation=0.8,..." over the defaults.
void parse_synthetic(const std::string& text, place::SyntheticRoutingSpec& s) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || used != value.size() || value.empty() || !std::isfinite(v))
      throw Error("--synthetic", "'" + item + "' is not key=number");
    const auto whole = [&](double lo, double hi) {
      if (v != std::floor(v) || v < lo || v > hi)
        throw Error("--synthetic", key + " must be a whole number in [" +
                                       std::to_string(static_cast<int64_t>(lo)) + ", " +
                                       std::to_string(static_cast<int64_t>(hi)) + "], got " +
                                       value);
      return static_cast<int>(v);
    };
    if (key == "skew") {
      s.skew = v;
    } else if (key == "locality") {
      s.locality = v;
    } else if (key == "correlation") {
      s.layer_correlation = v;
    } else if (key == "preferred") {
      s.preferred = whole(1, 1e6);
    } else if (key == "layers") {
      s.layers = whole(2, 4096);
    } else if (key == "samples") {
      s.samples = whole(1, 1 << 20);
    } else if (key == "tokens") {
      s.tokens = whole(1, 1 << 20);
    } else if (key == "iterations") {
      s.iterations = whole(2, 100000);
    } else if (key == "seed") {
      s.seed = static_cast<uint64_t>(whole(0, 2147483647.0));
    } else {
      throw Error("--synthetic", "unknown key '" + key +
                                     "' (skew, locality, correlation, preferred, layers, "
                                     "samples, tokens, iterations, seed)");
    }
  }
}

struct InferModel {
  std::string name;
  int hidden = 128, ffn_hidden = 512, experts = 16, top_k = 1;
  nn::ExpertKind expert = nn::ExpertKind::kGptFfn;
};

InferModel load_infer_model(const std::string& name) {
  InferModel m;
  m.name = name;
  if (name == "small") return m;
  const core::ModelConfig c = core::load_model(name);
  m.hidden = static_cast<int>(c.hidden);
  m.ffn_hidden = static_cast<int>(c.ffn_hidden);
  m.experts = static_cast<int>(c.experts);
  m.top_k = static_cast<int>(c.top_k);
  m.expert =
      c.ffn_type == core::FfnType::kSwiglu ? nn::ExpertKind::kMixtralFfn : nn::ExpertKind::kGptFfn;
  return m;
}

// Linear interpolation between order statistics (q in [0, 1]).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// The wall time of f on the slowest rank, ranks lined up by a barrier first.
double timed(const std::function<void()>& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  f();
  double dt = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

// Wall time of a local call on this rank (no barrier): planner and estimator costs.
template <typename F>
double local_time(F&& f) {
  const double t0 = MPI_Wtime();
  f();
  return MPI_Wtime() - t0;
}

// This rank's tokens [lo, hi) of the batch (flattened samples x tokens, starting at sample
// `first`) routed as the trace routed them at one layer, or perfectly balanced (Ideal).
nn::GateOutput trace_routing(const place::LayerRouting& layer, int first, int lo, int hi,
                             int experts) {
  const int k = layer.top_k(), tokens = layer.tokens();
  nn::GateOutput g;
  g.tokens = hi - lo;
  g.experts = experts;
  g.per_group = k;
  for (int t = 0; t < hi - lo; ++t) {
    const int global = lo + t;
    for (int j = 0; j < k; ++j) {
      g.token.push_back(t);
      g.expert.push_back(layer.at(first + global / tokens, global % tokens, j));
      g.weight.push_back(1.0f / static_cast<float>(k));
    }
  }
  return g;
}

// Lina Sec. 7.3.1's Ideal: "modify the gating network to constantly output a balanced expert
// selection". Slot s of the batch goes to expert s mod E: every expert gets the same number
// of slots (within one), from every rank (within one), and a token's k experts are distinct.
nn::GateOutput balanced_routing(int lo, int hi, int experts, int k) {
  nn::GateOutput g;
  g.tokens = hi - lo;
  g.experts = experts;
  g.per_group = k;
  for (int t = 0; t < hi - lo; ++t)
    for (int j = 0; j < k; ++j) {
      g.token.push_back(t);
      g.expert.push_back(static_cast<int>((static_cast<int64_t>(lo + t) * k + j) % experts));
      g.weight.push_back(1.0f / static_cast<float>(k));
    }
  return g;
}

rt::ReplicaPlan to_replica_plan(const infer::ReplicationPlan& p) {
  return p.devices_of_expert;
}

struct Stat {
  double median_ms = 0, p95_ms = 0;
};

Stat stat_of(const std::vector<double>& seconds) {
  return {quantile(seconds, 0.5) * 1e3, quantile(seconds, 0.95) * 1e3};
}

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

}  // namespace

InferCommand::InferCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "infer",
      "Lina popularity-aware MoE inference, measured: profile expert paths on the first part\n"
      "of a routing trace, then replay the rest batch by batch through a real replicated MoE\n"
      "layer on the ranks of mpirun for five variants (baseline EP, Lina without estimation,\n"
      "Lina without fine-tuning, Lina, Ideal = perfectly balanced routing). Prints median\n"
      "and p95 MoE layer time per layer and overall, the ratio to Ideal, and the estimation\n"
      "accuracy. Run as: mpirun -np P moecomm infer [...]");
  sub_->add_option("--model", model_,
                   "small (hidden 128, ffn 512, 16 experts, top-1), or a model preset or JSON "
                   "file (its hidden, ffn_hidden, experts, top_k, ffn_type); with --trace the "
                   "experts and top_k are the trace's")
      ->capture_default_str();
  auto* trace = sub_->add_option("--trace", trace_,
                                 "routing trace file (format: README, 'Routing trace'), e.g. "
                                 "the one `moecomm train` writes")
                    ->check(CLI::ExistingFile);
  sub_->add_option("--synthetic", synthetic_,
                   "synthetic skewed routing (the default): key=value,... over skew=1 (Zipf "
                   "exponent of expert popularity, 0 = uniform), locality=0.5, correlation=0.8 "
                   "(layer to layer), preferred=2, layers=8, samples=8, tokens=128, "
                   "iterations=48, seed=1")
      ->excludes(trace);
  sub_->add_option("--top-k", top_k_, "experts per token for synthetic routing (default: model's)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--path-length", path_length_,
                   "l: experts of a token's path that select its profiled distribution (Eq. 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub_->add_option("--max-experts-per-device", max_per_device_,
                   "experts a rank may host at once (Lina Sec. 6.2; default 4, or E/P when "
                   "larger)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--profile-iterations", profile_iterations_,
                   "trace iterations used for profiling (default: the first three quarters); "
                   "the rest are evaluated")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--batch-samples", batch_samples_,
                   "samples per inference batch (default: all samples of an iteration)")
      ->check(CLI::Range(1, 1 << 20));
  sub_->add_option("--batches", batches_, "evaluate at most this many batches (default: all)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--ranks-per-node", ranks_per_node_,
                   "ranks per node, for the bytes by link level (default: all on one node)")
      ->check(CLI::Range(0, 1 << 20));
  sub_->add_option("--timeout", timeout_s_, "seconds a collective may stall before the job fails")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  sub_->add_flag("--json", json_,
                 "print one JSON object: {overall: {VARIANT: {median_ms, p95_ms, "
                 "median_vs_ideal, p95_vs_ideal}}, layers: [...], accuracy: {...}, ...}");
}

int InferCommand::run(std::ostream& out, std::ostream& err) const {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int status = 0;
  try {
    status = infer(out, err);
  } catch (const std::exception& e) {
    // Every rank sees the same bad input; one failed rank must end the job.
    err << "error: rank " << world_rank() << ": " << e.what() << "\n";
    err.flush();
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 2);
    status = 2;
  }
  if (!initialized) MPI_Finalize();
  return status;
}

int InferCommand::infer(std::ostream& out, std::ostream& err) const {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int me = world_rank();
  InferModel model = load_infer_model(model_);

  // The routing: a trace file, or synthetic (experts and top_k of the model).
  place::RoutingTrace trace;
  place::SyntheticRoutingSpec syn = default_synthetic();
  if (!trace_.empty()) {
    trace = place::read_routing_trace(trace_);
    model.experts = trace.experts;
    model.top_k = trace.top_k;
  } else {
    parse_synthetic(synthetic_, syn);
    if (top_k_ > 0) model.top_k = top_k_;
    syn.experts = model.experts;
    syn.top_k = model.top_k;
    place::validate(syn);
    trace = place::generate_routing_trace(syn);
  }
  const int experts = model.experts, k = model.top_k, layers = trace.layers();
  const int iterations = static_cast<int>(trace.iterations.size());
  if (layers < 2)
    throw Error("--trace", "needs at least 2 MoE layers to estimate one from another");
  if (iterations < 2)
    throw Error("--trace", "needs at least 2 iterations: profile on the first, evaluate the rest");
  if (path_length_ > layers - 1)
    throw Error("--path-length",
                std::to_string(path_length_) +
                    " must be at most the layers - 1 = " + std::to_string(layers - 1));
  if (experts % world != 0)
    throw Error("--model", std::to_string(experts) + " experts must be a multiple of the " +
                               std::to_string(world) + " ranks (the baseline puts E/P per rank)");
  const int max_per = max_per_device_ > 0 ? max_per_device_ : std::max(4, experts / world);
  if (max_per < experts / world)
    throw Error("--max-experts-per-device",
                std::to_string(max_per) + " is below the " + std::to_string(experts / world) +
                    " experts per rank of the baseline (E = " + std::to_string(experts) +
                    ", P = " + std::to_string(world) + ")");
  const int profile_its =
      profile_iterations_ > 0 ? profile_iterations_ : iterations - std::max(1, iterations / 4);
  if (profile_its >= iterations)
    throw Error("--profile-iterations", std::to_string(profile_its) +
                                            " leaves no iteration to evaluate (the trace has " +
                                            std::to_string(iterations) + ")");
  const int samples = trace.samples(), tokens = trace.tokens();
  const int batch_samples = batch_samples_ > 0 ? batch_samples_ : samples;
  if (batch_samples > samples)
    throw Error("--batch-samples", std::to_string(batch_samples) + " is more than the " +
                                       std::to_string(samples) + " samples of an iteration");
  const int batch_tokens = batch_samples * tokens;
  if (batch_tokens < world)
    throw Error("--batch-samples", "a batch of " + std::to_string(batch_tokens) +
                                       " tokens leaves a rank with none (" + std::to_string(world) +
                                       " ranks)");
  // Five layers (one per variant) with every expert in host memory and max_per resident.
  const double gemms = model.expert == nn::ExpertKind::kMixtralFfn ? 3 : 2;
  const double gb = static_cast<double>(kVariants) * 4.0 * (experts + max_per) * gemms *
                    model.hidden * static_cast<double>(model.ffn_hidden) / 1e9;
  if (gb > kMaxInferGB)
    throw Error("--model", "needs about " + fmt("%.1f", gb) +
                               " GB per rank of expert weights (limit " + fmt("%.0f", kMaxInferGB) +
                               "): moecomm infer runs small models");

  // Profile on the first iterations (Sec. 5.2), evaluate on the rest.
  place::RoutingTrace profile_trace{trace.experts, trace.top_k, {}};
  profile_trace.iterations.assign(trace.iterations.begin(), trace.iterations.begin() + profile_its);
  const infer::PathProfile profile(profile_trace, path_length_);
  struct Batch {
    int iteration, first_sample;
  };
  std::vector<Batch> batches;
  for (int it = profile_its; it < iterations; ++it)
    for (int s = 0; s + batch_samples <= samples; s += batch_samples) batches.push_back({it, s});
  if (batches_ > 0 && static_cast<int>(batches.size()) > batches_) batches.resize(batches_);

  core::RankGroup all(static_cast<size_t>(world));
  std::iota(all.begin(), all.end(), 0);
  rt::CommPool pool(MPI_COMM_WORLD, {{all, 0, "ep"}});
  const rt::Comm& ep = pool.at({all, 0});
  rt::CallOptions options;
  options.timeout_s = timeout_s_;
  options.ranks_per_node = ranks_per_node_ > 0 ? ranks_per_node_ : world;
  nn::MoeLayerSpec spec;
  spec.hidden = model.hidden;
  spec.ffn_hidden = model.ffn_hidden;
  spec.experts = experts;
  spec.top_k = k;
  spec.expert = model.expert;
  spec.seed = 7;
  std::vector<std::unique_ptr<rt::ReplicatedMoeLayer>> layer;
  for (int v = 0; v < kVariants; ++v) {
    layer.push_back(std::make_unique<rt::ReplicatedMoeLayer>(spec, ep, options, max_per));
    layer.back()->set_plan(rt::identity_plan(experts, world));
  }
  const infer::ReplicationOptions ropt{world, max_per};
  const int lo = static_cast<int>(static_cast<int64_t>(me) * batch_tokens / world);
  const int hi = static_cast<int>(static_cast<int64_t>(me + 1) * batch_tokens / world);
  const nn::Tensor x = nn::Tensor::randn({hi - lo, model.hidden}, 1000 + static_cast<uint64_t>(me));

  if (me == 0 && !json_) {
    out << "Lina inference on " << world << " ranks: model " << model.name << " (hidden "
        << model.hidden << ", ffn " << model.ffn_hidden << ", " << experts << " experts, top-" << k
        << "), at most " << max_per << " experts per rank, path length " << path_length_ << "\n";
    if (trace_.empty())
      out << "synthetic routing: skew " << syn.skew << ", locality " << syn.locality
          << ", correlation " << syn.layer_correlation << ", preferred " << syn.preferred
          << ", seed " << syn.seed << "\n";
    else
      out << "routing trace " << trace_ << "\n";
    out << "profiled " << profile_its << " iterations (" << samples << " samples x " << tokens
        << " tokens); evaluating " << batches.size() << " batches of " << batch_tokens
        << " tokens x " << layers - 1 << " MoE layers (1.." << layers - 1 << ")\n";
    out.flush();
  }

  // Warm-up: one untimed forward per variant (allocations, MPI connections).
  {
    const nn::GateOutput g = balanced_routing(lo, hi, experts, k);
    for (auto& l : layer) l->forward_routed(x, g);
  }

  const int scored = layers - 1;  // layers 1 .. L-1, each estimated from its predecessor
  // seconds[variant][layer index][batch]
  std::vector<std::vector<std::vector<double>>> seconds(
      kVariants, std::vector<std::vector<double>>(static_cast<size_t>(scored)));
  std::vector<int64_t> accurate(static_cast<size_t>(scored), 0),
      estimates(static_cast<size_t>(scored), 0);
  std::vector<double> estimate_s, phase_one_s, phase_one_swap_s, replan_s;
  int64_t replanned = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    const std::vector<place::LayerRouting>& routing =
        trace.iterations[static_cast<size_t>(batch.iteration)];
    const int s0 = batch.first_sample, s1 = batch.first_sample + batch_samples;
    for (int li = 1; li < layers; ++li) {
      const size_t at = static_cast<size_t>(li - 1);
      const place::LayerRouting& lr = routing[static_cast<size_t>(li)];
      const nn::GateOutput g = trace_routing(lr, s0, lo, hi, experts);
      // Before the gate, off the critical path (Lina overlaps it with layer li-1): Eq. 1's
      // estimate from each token's path up to li-1, then phase one.
      std::vector<double> est;
      infer::ReplicationPlan phase_one;
      estimate_s.push_back(local_time([&] {
        est = infer::estimate_popularity(
            profile, li - 1, infer::token_paths(routing, li - 1, path_length_, s0, s1), k);
      }));
      phase_one_s.push_back(local_time([&] { phase_one = infer::plan_replication(est, ropt); }));
      const rt::ReplicaPlan p1 = to_replica_plan(phase_one);
      phase_one_swap_s.push_back(timed([&] {
        layer[kNoFineTuning]->set_plan(p1);
        layer[kLina]->set_plan(p1);
      }));
      // The actual counts after the gate (all ranks know them from the trace; Lina gets them
      // piggybacked on the A2A's metadata, not timed here).
      const std::vector<int64_t> counts = infer::expert_counts(lr, experts, s0, s1);

      seconds[kBaseline][at].push_back(timed([&] { layer[kBaseline]->forward_routed(x, g); }));
      seconds[kNoEstimation][at].push_back(timed([&] {
        const infer::ReplicationPlan p =
            infer::plan_replication(infer::popularity_of_counts(counts), ropt);
        layer[kNoEstimation]->set_plan(to_replica_plan(p));
        layer[kNoEstimation]->forward_routed(x, g);
      }));
      seconds[kNoFineTuning][at].push_back(
          timed([&] { layer[kNoFineTuning]->forward_routed(x, g); }));
      bool again = false;
      seconds[kLina][at].push_back(timed([&] {
        const double t0 = MPI_Wtime();
        infer::PhaseTwo two = infer::fine_tune(phase_one, est, counts, k, ropt);
        again = two.replanned;
        if (again) layer[kLina]->set_plan(to_replica_plan(two.plan));
        if (again) replan_s.push_back(MPI_Wtime() - t0);
        layer[kLina]->forward_routed(x, g);
      }));
      const nn::GateOutput ideal = balanced_routing(lo, hi, experts, k);
      seconds[kIdeal][at].push_back(timed([&] { layer[kIdeal]->forward_routed(x, ideal); }));
      ++estimates[at];
      accurate[at] += again ? 0 : 1;
      replanned += again ? 1 : 0;
    }
    if (me == 0)
      err << "infer: batch " << b + 1 << "/" << batches.size() << " done\n" << std::flush;
  }
  if (me != 0) return 0;

  // Overall: a batch's MoE time is the sum over its MoE layers (the inference time of Fig. 16
  // without the dense part).
  std::vector<std::vector<double>> total(kVariants, std::vector<double>(batches.size(), 0.0));
  for (int v = 0; v < kVariants; ++v)
    for (int li = 0; li < scored; ++li)
      for (size_t b = 0; b < batches.size(); ++b)
        total[static_cast<size_t>(v)][b] +=
            seconds[static_cast<size_t>(v)][static_cast<size_t>(li)][b];
  const auto stats_json = [&](const std::vector<std::vector<double>>& per_variant) {
    json j;
    const Stat ideal = stat_of(per_variant[kIdeal]);
    for (int v = 0; v < kVariants; ++v) {
      const Stat s = stat_of(per_variant[static_cast<size_t>(v)]);
      j[kNames[v]] = {{"median_ms", s.median_ms},
                      {"p95_ms", s.p95_ms},
                      {"median_vs_ideal", ideal.median_ms > 0 ? s.median_ms / ideal.median_ms : 0},
                      {"p95_vs_ideal", ideal.p95_ms > 0 ? s.p95_ms / ideal.p95_ms : 0}};
    }
    return j;
  };
  const json overall = stats_json(total);
  json per_layer = json::array();
  int64_t all_accurate = 0, all_estimates = 0;
  for (int li = 0; li < scored; ++li) {
    std::vector<std::vector<double>> per_variant;
    for (int v = 0; v < kVariants; ++v)
      per_variant.push_back(seconds[static_cast<size_t>(v)][static_cast<size_t>(li)]);
    const int64_t a = accurate[static_cast<size_t>(li)], n = estimates[static_cast<size_t>(li)];
    all_accurate += a;
    all_estimates += n;
    per_layer.push_back({{"layer", li + 1},
                         {"accuracy", n > 0 ? static_cast<double>(a) / static_cast<double>(n) : 0},
                         {"accurate", a},
                         {"estimates", n},
                         {"time", stats_json(per_variant)}});
  }
  const double accuracy =
      all_estimates > 0 ? static_cast<double>(all_accurate) / static_cast<double>(all_estimates)
                        : 0;
  const json lina = {{"replanned", replanned},
                     {"estimate_ms_median", quantile(estimate_s, 0.5) * 1e3},
                     {"phase_one_ms_median", quantile(phase_one_s, 0.5) * 1e3},
                     {"phase_one_swap_ms_median", quantile(phase_one_swap_s, 0.5) * 1e3},
                     {"phase_two_replan_ms_median", quantile(replan_s, 0.5) * 1e3},
                     {"swaps",
                      {{"lina", layer[kLina]->swaps()},
                       {"lina_no_estimation", layer[kNoEstimation]->swaps()},
                       {"lina_no_fine_tuning", layer[kNoFineTuning]->swaps()}}}};
  if (json_) {
    json j = {{"ranks", world},
              {"model",
               {{"name", model.name},
                {"hidden", model.hidden},
                {"ffn_hidden", model.ffn_hidden},
                {"experts", experts},
                {"top_k", k}}},
              {"routing", trace_.empty() ? json{{"synthetic",
                                                 {{"skew", syn.skew},
                                                  {"locality", syn.locality},
                                                  {"correlation", syn.layer_correlation},
                                                  {"preferred", syn.preferred},
                                                  {"seed", syn.seed}}}}
                                         : json{{"trace", trace_}}},
              {"path_length", path_length_},
              {"max_experts_per_device", max_per},
              {"profile_iterations", profile_its},
              {"batches", batches.size()},
              {"tokens_per_batch", batch_tokens},
              {"moe_layers", scored},
              {"variants", std::vector<std::string>(kNames, kNames + kVariants)},
              {"ideal", "perfectly balanced routing (slot s to expert s mod E), identity plan"},
              {"overall", overall},
              {"layers", per_layer},
              {"accuracy",
               {{"overall", accuracy}, {"accurate", all_accurate}, {"estimates", all_estimates}}},
              {"lina", lina}};
    out << j.dump() << "\n";
    return 0;
  }
  char line[256];
  out << "\nMoE time per batch (sum over layers), ms, slowest rank:\n";
  std::snprintf(line, sizeof line, "  %-22s %10s %10s %14s %11s\n", "variant", "median", "p95",
                "median/ideal", "p95/ideal");
  out << line;
  for (int v = 0; v < kVariants; ++v) {
    const json& s = overall[kNames[v]];
    std::snprintf(line, sizeof line, "  %-22s %10.3f %10.3f %13.2fx %10.2fx\n", kLabels[v],
                  s["median_ms"].get<double>(), s["p95_ms"].get<double>(),
                  s["median_vs_ideal"].get<double>(), s["p95_vs_ideal"].get<double>());
    out << line;
  }
  out << "\nper MoE layer: median / p95 ms, and estimation accuracy (top-" << 2 * k
      << " experts estimated = actual)\n";
  std::snprintf(line, sizeof line, "  %-5s %16s %16s %16s %16s %16s %9s\n", "layer", "baseline",
                "w/o estimation", "w/o fine-tuning", "Lina", "ideal", "accuracy");
  out << line;
  for (const json& l : per_layer) {
    std::string row = fmt("  %-5.0f", l["layer"].get<double>());
    for (int v = 0; v < kVariants; ++v) {
      const json& s = l["time"][kNames[v]];
      char cell[64];
      std::snprintf(cell, sizeof cell, " %7.3f/%-8.3f", s["median_ms"].get<double>(),
                    s["p95_ms"].get<double>());
      row += cell;
    }
    row += fmt(" %8.1f%%\n", 100.0 * l["accuracy"].get<double>());
    out << row;
  }
  std::snprintf(line, sizeof line,
                "\nestimation accuracy (path length %d): %.1f%% (%lld of %lld); phase two "
                "re-planned %lld times\n",
                path_length_, 100.0 * accuracy, static_cast<long long>(all_accurate),
                static_cast<long long>(all_estimates), static_cast<long long>(replanned));
  out << line;
  std::snprintf(line, sizeof line,
                "off the critical path (median ms): estimate %.3f, phase one %.3f, phase-one "
                "swap %.3f; phase two re-plan %.3f (on the path)\n",
                lina["estimate_ms_median"].get<double>(), lina["phase_one_ms_median"].get<double>(),
                lina["phase_one_swap_ms_median"].get<double>(),
                lina["phase_two_replan_ms_median"].get<double>());
  out << line;
  out << "ideal: the same tokens with a perfectly balanced routing on the baseline placement "
         "(Lina Sec. 7.3.1)\n";
  return 0;
}

}  // namespace moecomm::cli

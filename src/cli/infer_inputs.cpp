#include "cli/infer_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/infer_variants.h"
#include "core/error.h"
#include "core/ffn_type_names.h"
#include "core/item_list.h"
#include "core/presets.h"
#include "core/suggest.h"

namespace moecomm::cli {

namespace {

// Expert weights per rank above which `moecomm infer` refuses the model.
constexpr double kMaxInferGB = 4;

InferModel load_infer_model(const std::string& name) {
  InferModel m;
  m.name = name;
  if (name == "small") return m;
  const core::ModelConfig c = core::load_model(name);
  m.hidden = static_cast<int>(c.hidden);
  m.ffn_hidden = static_cast<int>(c.ffn_hidden);
  m.experts = static_cast<int>(c.experts);
  m.top_k = static_cast<int>(c.top_k);
  m.ffn_type = c.ffn_type;
  return m;
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

// `value` of "key=value" as a finite number; throws naming the whole item otherwise.
double synthetic_number(const std::string& item, size_t eq, const std::string& value) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (eq == std::string::npos || used != value.size() || value.empty() || !std::isfinite(v))
    throw Error("--synthetic", "'" + item + "' is not key=number");
  return v;
}

int synthetic_whole(const std::string& key, const std::string& value, double v, double lo,
                    double hi) {
  if (v != std::floor(v) || v < lo || v > hi)
    throw Error("--synthetic", key + " must be a whole number in [" +
                                   std::to_string(static_cast<int64_t>(lo)) + ", " +
                                   std::to_string(static_cast<int64_t>(hi)) + "], got " + value);
  return static_cast<int>(v);
}

const std::vector<std::string>& synthetic_keys() {
  static const std::vector<std::string> keys = {"skew",      "locality",   "correlation",
                                                "preferred", "layers",     "samples",
                                                "tokens",    "iterations", "seed"};
  return keys;
}

void set_synthetic_key(const std::string& key, const std::string& value, double v,
                       place::SyntheticRoutingSpec& s) {
  const auto whole = [&](double lo, double hi) { return synthetic_whole(key, value, v, lo, hi); };
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
    throw Error("--synthetic", "unknown key '" + key + "'" +
                                   core::did_you_mean(key, synthetic_keys()) +
                                   " (skew, locality, correlation, preferred, layers, "
                                   "samples, tokens, iterations, seed)");
  }
}

// "skew=1.2,locality=0.5,correlation=0.8,..." over the defaults. An empty item or a key
// given twice is refused, as in --strategy and --parallel: either is a typo.
void parse_synthetic(const std::string& text, place::SyntheticRoutingSpec& s) {
  std::set<std::string> given;
  for (const std::string& item : core::split_items(text, "--synthetic")) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const double v = synthetic_number(item, eq, value);
    if (!given.insert(key).second) throw Error("--synthetic", key + " is given twice");
    set_synthetic_key(key, value, v, s);
  }
}

std::string model_text(const InferModel& m) {
  return m.name + ", hidden " + std::to_string(m.hidden) + ", ffn " + std::to_string(m.ffn_hidden) +
         " (" + std::string(core::to_string(m.ffn_type)) + "), " + std::to_string(m.experts) +
         " experts, top-" + std::to_string(m.top_k);
}

// A trace's model: its own shape (when it records one and --model is not given), and always
// its experts and top_k, which its expert ids are drawn from.
void take_trace_model(const InferFlags& f, InferInputs& in) {
  const std::optional<place::TraceModel>& recorded = in.trace.model;
  if (recorded && !f.model_given) {
    in.model.name = recorded->name;
    in.model.hidden = static_cast<int>(recorded->hidden);
    in.model.ffn_hidden = static_cast<int>(recorded->ffn_hidden);
    in.model.ffn_type = recorded->ffn_type;
    in.model_from = "trace";
  } else {
    in.model_from = f.model_given ? "--model" : "default";
  }
  in.model.experts = in.trace.experts;
  in.model.top_k = in.trace.top_k;
  if (in.model_from == "trace")
    in.notes.push_back("model shape from the trace " + f.trace + ": " + model_text(in.model) +
                       " (--model overrides)");
  else if (in.model_from == "--model")
    in.notes.push_back("model " + model_text(in.model) + " (--model; experts, top-k: the trace's)");
  else
    in.notes.push_back("model " + model_text(in.model) + " (the default: the trace " + f.trace +
                       " records no model, pass --model; experts and top-k are the trace's)");
}

// The routing: a trace file (its experts and top_k override the model's), or synthetic with
// the model's experts and top_k (--top-k overriding the latter).
void load_routing(const InferFlags& f, InferInputs& in) {
  in.trace_file = f.trace;
  in.synthetic = default_synthetic();
  if (!f.trace.empty()) {
    in.trace = place::read_routing_trace(f.trace);
    take_trace_model(f, in);
    return;
  }
  in.model_from = f.model_given ? "--model" : "default";
  parse_synthetic(f.synthetic, in.synthetic);
  if (f.top_k > 0) in.model.top_k = f.top_k;
  in.synthetic.experts = in.model.experts;
  in.synthetic.top_k = in.model.top_k;
  place::validate(in.synthetic);
  in.trace = place::generate_routing_trace(in.synthetic);
}

// Layer i is estimated from its predecessors' paths (Eq. 1), so it takes 2 layers, and
// profiling (Sec. 5.2) and evaluation each take at least one iteration. The default path
// length is capped by the layers; one given is checked against them.
void check_trace_shape(const InferFlags& f, InferInputs& in) {
  const int layers = in.layers();
  const std::string where = f.trace.empty() ? "--synthetic" : f.trace;
  if (layers < 2) throw Error(where, "needs at least 2 MoE layers to estimate one from another");
  if (in.iterations() < 2)
    throw Error(where, "needs at least 2 iterations: profile on the first, evaluate the rest");
  if (f.path_length > layers - 1)
    throw Error("--path-length",
                std::to_string(f.path_length) +
                    " must be at most the layers - 1 = " + std::to_string(layers - 1));
  in.path_length = f.path_length > 0 ? f.path_length : std::min(kDefaultPathLength, layers - 1);
  if (f.path_length == 0 && in.path_length < kDefaultPathLength)
    in.notes.push_back("path length " + std::to_string(in.path_length) + " (the default " +
                       std::to_string(kDefaultPathLength) + ", capped at the " +
                       std::to_string(layers) + " layers - 1)");
}

// Ranks per node: --ranks-per-node, else the trace's own when this job has as many ranks as
// the trace was recorded on, else all ranks on one node.
void resolve_ranks_per_node(const InferFlags& f, InferInputs& in) {
  const std::optional<place::TraceLayout>& recorded = in.trace.layout;
  if (f.ranks_per_node > 0) {
    in.ranks_per_node = f.ranks_per_node;
    in.layout_from = "--ranks-per-node";
    return;
  }
  in.ranks_per_node = in.ranks;
  if (!recorded) return;
  if (recorded->ranks == in.ranks) {
    in.ranks_per_node = recorded->ranks_per_node;
    in.layout_from = "trace";
    in.notes.push_back("layout from the trace " + f.trace + ": " +
                       std::to_string(in.ranks_per_node) +
                       " ranks per node, as it was recorded (--ranks-per-node overrides)");
    return;
  }
  in.notes.push_back(
      "layout: all " + std::to_string(in.ranks) + " ranks on one node (the default: the trace " +
      f.trace + " was recorded on " + std::to_string(recorded->ranks) + " ranks, " +
      std::to_string(recorded->ranks_per_node) + " per node; pass --ranks-per-node)");
}

// The baseline puts E/P experts per rank; Lina may host more (Sec. 6.2, 4 in Sec. 7.3).
int resolve_max_per_device(const InferFlags& f, int experts, int world) {
  if (experts % world != 0) {
    // A trace's experts are its own; otherwise they are the model's.
    const std::string where = f.trace.empty() ? "--model" : f.trace + ": experts";
    throw Error(where, std::to_string(experts) + " experts must be a multiple of the " +
                           std::to_string(world) +
                           " ranks (the baseline puts E/P per rank): run on a number of ranks "
                           "that divides " +
                           std::to_string(experts));
  }
  const int max_per = f.max_per_device > 0 ? f.max_per_device : std::max(4, experts / world);
  if (max_per < experts / world)
    throw Error("--max-experts-per-device",
                std::to_string(max_per) + " is below the " + std::to_string(experts / world) +
                    " experts per rank of the baseline (E = " + std::to_string(experts) +
                    ", P = " + std::to_string(world) + ")");
  return max_per;
}

int resolve_profile_iterations(const InferFlags& f, int iterations) {
  const int profile_its =
      f.profile_iterations > 0 ? f.profile_iterations : iterations - std::max(1, iterations / 4);
  if (profile_its >= iterations)
    throw Error("--profile-iterations", std::to_string(profile_its) +
                                            " leaves no iteration to evaluate (the trace has " +
                                            std::to_string(iterations) + ")");
  return profile_its;
}

void resolve_batch(const InferFlags& f, InferInputs& in) {
  const int samples = in.trace.samples();
  in.batch_samples = f.batch_samples > 0 ? f.batch_samples : samples;
  if (in.batch_samples > samples)
    throw Error("--batch-samples", std::to_string(in.batch_samples) + " is more than the " +
                                       std::to_string(samples) + " samples of an iteration");
  in.batch_tokens = in.batch_samples * in.trace.tokens();
  if (in.batch_tokens < in.ranks)
    throw Error("--batch-samples", "a batch of " + std::to_string(in.batch_tokens) +
                                       " tokens leaves a rank with none (" +
                                       std::to_string(in.ranks) + " ranks)");
}

std::string with_decimals(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// Five layers (one per variant) with every expert in host memory and max_per resident.
void check_memory(const InferInputs& in) {
  const InferModel& m = in.model;
  const double gemms = m.ffn_type == core::FfnType::kSwiglu ? 3 : 2;
  const double gb = static_cast<double>(kVariants) * 4.0 * (m.experts + in.max_per_device) * gemms *
                    m.hidden * static_cast<double>(m.ffn_hidden) / 1e9;
  if (gb > kMaxInferGB)
    throw Error("--model",
                "needs about " + with_decimals(gb, 1) + " GB per rank of expert weights (limit " +
                    with_decimals(kMaxInferGB, 0) + "): moecomm infer runs small models");
}

}  // namespace

InferInputs load_infer_inputs(const InferFlags& flags, int ranks) {
  InferInputs in;
  in.ranks = ranks;
  in.model = load_infer_model(flags.model);
  load_routing(flags, in);
  check_trace_shape(flags, in);
  in.max_per_device = resolve_max_per_device(flags, in.model.experts, ranks);
  in.profile_iterations = resolve_profile_iterations(flags, in.iterations());
  resolve_batch(flags, in);
  check_memory(in);
  in.max_batches = flags.batches;
  resolve_ranks_per_node(flags, in);
  in.timeout_s = flags.timeout_s;
  return in;
}

}  // namespace moecomm::cli

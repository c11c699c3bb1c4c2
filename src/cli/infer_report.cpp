#include "cli/infer_report.h"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "core/statistics.h"

namespace moecomm::cli {

using nlohmann::json;

namespace {

double median_ms(const std::vector<double>& seconds) {
  return core::quantile(seconds, 0.5) * 1e3;
}

struct Stat {
  double median_ms = 0, p95_ms = 0;
};

Stat stat_of(const std::vector<double>& seconds) {
  return {core::quantile(seconds, 0.5) * 1e3, core::quantile(seconds, 0.95) * 1e3};
}

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

// {VARIANT: {median_ms, p95_ms, median_vs_ideal, p95_vs_ideal}} from seconds per variant.
json stats_json(const std::vector<std::vector<double>>& per_variant) {
  json j;
  const Stat ideal = stat_of(per_variant[kIdeal]);
  for (int v = 0; v < kVariants; ++v) {
    const Stat s = stat_of(per_variant[static_cast<size_t>(v)]);
    j[kVariantNames[v]] = {
        {"median_ms", s.median_ms},
        {"p95_ms", s.p95_ms},
        {"median_vs_ideal", ideal.median_ms > 0 ? s.median_ms / ideal.median_ms : 0},
        {"p95_vs_ideal", ideal.p95_ms > 0 ? s.p95_ms / ideal.p95_ms : 0}};
  }
  return j;
}

// A batch's MoE time is the sum over its MoE layers (the inference time of Fig. 16 without
// the dense part).
json overall_json(const InferReplayResult& r) {
  std::vector<std::vector<double>> total(kVariants, std::vector<double>(r.batches, 0.0));
  for (size_t v = 0; v < kVariants; ++v)
    for (const std::vector<double>& layer : r.seconds[v])
      for (size_t b = 0; b < r.batches; ++b) total[v][b] += layer[b];
  return stats_json(total);
}

json layers_json(const InferReplayResult& r) {
  json per_layer = json::array();
  for (size_t li = 0; li < r.accurate.size(); ++li) {
    std::vector<std::vector<double>> per_variant;
    for (size_t v = 0; v < kVariants; ++v) per_variant.push_back(r.seconds[v][li]);
    const int64_t a = r.accurate[li], n = r.estimates[li];
    per_layer.push_back({{"layer", static_cast<int>(li) + 1},
                         {"accuracy", n > 0 ? static_cast<double>(a) / static_cast<double>(n) : 0},
                         {"accurate", a},
                         {"estimates", n},
                         {"time", stats_json(per_variant)}});
  }
  return per_layer;
}

json accuracy_json(const InferReplayResult& r) {
  int64_t accurate = 0, estimates = 0;
  for (size_t li = 0; li < r.accurate.size(); ++li) {
    accurate += r.accurate[li];
    estimates += r.estimates[li];
  }
  const double overall =
      estimates > 0 ? static_cast<double>(accurate) / static_cast<double>(estimates) : 0;
  return {{"overall", overall}, {"accurate", accurate}, {"estimates", estimates}};
}

json lina_json(const InferReplayResult& r) {
  return {{"replanned", r.replanned},
          {"estimate_ms_median", median_ms(r.estimate_s)},
          {"phase_one_ms_median", median_ms(r.phase_one_s)},
          {"phase_one_swap_ms_median", median_ms(r.phase_one_swap_s)},
          {"phase_two_replan_ms_median", median_ms(r.replan_s)},
          {"swaps",
           {{"lina", r.swaps[kLina]},
            {"lina_no_estimation", r.swaps[kNoEstimation]},
            {"lina_no_fine_tuning", r.swaps[kNoFineTuning]}}}};
}

// Max/mean token-slots per rank of each variant's plan under the counts it ran: the mean
// over (batch, layer), and the worst.
json balance_json(const InferReplayResult& r) {
  json j;
  for (int v = 0; v < kVariants; ++v) {
    const std::vector<double>& x = r.max_over_mean[v];
    double sum = 0, worst = 0;
    for (double m : x) {
      sum += m;
      worst = std::max(worst, m);
    }
    j[kVariantNames[v]] = {{"mean", x.empty() ? 0 : sum / static_cast<double>(x.size())},
                           {"max", worst}};
  }
  return j;
}

json routing_json(const InferInputs& in) {
  if (!in.trace_file.empty()) return {{"trace", in.trace_file}};
  const place::SyntheticRoutingSpec& syn = in.synthetic;
  return {{"synthetic",
           {{"skew", syn.skew},
            {"locality", syn.locality},
            {"correlation", syn.layer_correlation},
            {"preferred", syn.preferred},
            {"seed", syn.seed}}}};
}

// Beside the times, each variant's max/mean token-slots per rank under its plan (the mean
// and the worst over batches and layers): plain EP's balance next to Lina's.
void print_overall_table(std::ostream& out, const json& overall, const json& balance) {
  char line[256];
  out << "\nMoE time per batch (sum over layers), ms, slowest rank; load: max/mean token-slots "
         "per rank, mean and worst:\n";
  std::snprintf(line, sizeof line, "  %-22s %10s %10s %14s %11s %10s %7s\n", "variant", "median",
                "p95", "median/ideal", "p95/ideal", "load mean", "worst");
  out << line;
  for (int v = 0; v < kVariants; ++v) {
    const json& s = overall[kVariantNames[v]];
    const json& b = balance[kVariantNames[v]];
    std::snprintf(line, sizeof line, "  %-22s %10.3f %10.3f %13.2fx %10.2fx %10.2f %7.2f\n",
                  kVariantLabels[v], s["median_ms"].get<double>(), s["p95_ms"].get<double>(),
                  s["median_vs_ideal"].get<double>(), s["p95_vs_ideal"].get<double>(),
                  b["mean"].get<double>(), b["max"].get<double>());
    out << line;
  }
}

void print_layer_table(std::ostream& out, int top_k, const json& per_layer) {
  char line[256];
  out << "\nper MoE layer: median / p95 ms, slowest rank, and estimation accuracy (top-"
      << 2 * top_k << " experts estimated = actual)\n";
  std::snprintf(line, sizeof line, "  %-5s %16s %16s %16s %16s %16s %9s\n", "layer", "baseline",
                "w/o estimation", "w/o fine-tuning", "Lina", "ideal", "accuracy");
  out << line;
  for (const json& l : per_layer) {
    std::string row = fmt("  %-5.0f", l["layer"].get<double>());
    for (int v = 0; v < kVariants; ++v) {
      const json& s = l["time"][kVariantNames[v]];
      char cell[64];
      std::snprintf(cell, sizeof cell, " %7.3f/%-8.3f", s["median_ms"].get<double>(),
                    s["p95_ms"].get<double>());
      row += cell;
    }
    row += fmt(" %8.1f%%\n", 100.0 * l["accuracy"].get<double>());
    out << row;
  }
}

void print_lina_summary(std::ostream& out, int path_length, const json& accuracy,
                        const json& lina) {
  char line[256];
  std::snprintf(line, sizeof line,
                "\nestimation accuracy (path length %d): %.1f%% (%lld of %lld); phase two "
                "re-planned %lld times\n",
                path_length, 100.0 * accuracy["overall"].get<double>(),
                accuracy["accurate"].get<long long>(), accuracy["estimates"].get<long long>(),
                lina["replanned"].get<long long>());
  out << line;
  std::snprintf(line, sizeof line,
                "off the critical path (median ms): estimate %.3f, phase one %.3f, phase-one "
                "swap %.3f; phase two re-plan %.3f (on the path)\n",
                lina["estimate_ms_median"].get<double>(), lina["phase_one_ms_median"].get<double>(),
                lina["phase_one_swap_ms_median"].get<double>(),
                lina["phase_two_replan_ms_median"].get<double>());
  out << line;
}

}  // namespace

void print_infer_header(std::ostream& out, const InferInputs& in, size_t batches) {
  const InferModel& m = in.model;
  out << "Lina inference on " << in.ranks << " ranks: model " << m.name << " (hidden " << m.hidden
      << ", ffn " << m.ffn_hidden << ", " << m.experts << " experts, top-" << m.top_k
      << "), at most " << in.max_per_device << " experts per rank, path length " << in.path_length
      << "\n";
  for (const std::string& note : in.notes) out << note << "\n";
  const place::SyntheticRoutingSpec& syn = in.synthetic;
  if (in.trace_file.empty())
    out << "synthetic routing: skew " << syn.skew << ", locality " << syn.locality
        << ", correlation " << syn.layer_correlation << ", preferred " << syn.preferred << ", seed "
        << syn.seed << "\n";
  else
    out << "routing trace " << in.trace_file << "\n";
  const int layers = in.layers();
  out << "profiled " << in.profile_iterations << " iterations (" << in.trace.samples()
      << " samples x " << in.trace.tokens() << " tokens); evaluating " << batches << " batches of "
      << in.batch_tokens << " tokens x " << layers - 1 << " MoE layers (1.." << layers - 1 << ")\n";
  out.flush();
}

json infer_json(const InferInputs& in, const InferReplayResult& r) {
  return {{"ranks", in.ranks},
          {"model",
           {{"name", in.model.name},
            {"hidden", in.model.hidden},
            {"ffn_hidden", in.model.ffn_hidden},
            {"experts", in.model.experts},
            {"top_k", in.model.top_k}}},
          {"model_from", in.model_from},
          {"ranks_per_node", in.ranks_per_node},
          {"layout_from", in.layout_from},
          {"routing", routing_json(in)},
          {"path_length", in.path_length},
          {"max_experts_per_device", in.max_per_device},
          {"profile_iterations", in.profile_iterations},
          {"batches", r.batches},
          {"tokens_per_batch", in.batch_tokens},
          {"moe_layers", in.layers() - 1},
          {"variants", std::vector<std::string>(kVariantNames, kVariantNames + kVariants)},
          {"ideal", "perfectly balanced routing (slot s to expert s mod E), identity plan"},
          {"overall", overall_json(r)},
          {"layers", layers_json(r)},
          {"accuracy", accuracy_json(r)},
          {"max_over_mean", balance_json(r)},
          {"lina", lina_json(r)}};
}

void print_infer_tables(std::ostream& out, const InferInputs& in, const json& report) {
  print_overall_table(out, report["overall"], report["max_over_mean"]);
  print_layer_table(out, in.model.top_k, report["layers"]);
  print_lina_summary(out, in.path_length, report["accuracy"], report["lina"]);
  out << "ideal: the same tokens with a perfectly balanced routing on the baseline placement "
         "(Lina Sec. 7.3.1)\n";
}

}  // namespace moecomm::cli

#include "cli/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "cli/model_setup.h"
#include "core/error.h"
#include "core/presets.h"
#include "plan/strategy_table.h"

namespace moecomm::cli {

PlanCommand::PlanCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "plan",
      "Predict forward and backward time and memory of one MoE layer for every candidate\n"
      "strategy (baseline EP, hierarchical A2A, MoNTA O1/O2/O3, FSMoE, HybridEP, Lina)\n"
      "from the papers' analytical models, and recommend one.");
  sub_->add_option("--model", model_,
                   "model preset name or JSON file (default: " + std::string(core::kDefaultModel) +
                       "; see data/README.md)");
  sub_->add_option("--cluster", cluster_,
                   "cluster preset name or JSON file (default: the model's own testbed if it "
                   "names one, else " +
                       std::string(core::kDefaultCluster) + ")");
  sub_->add_option("--parallel", parallel_,
                   "parallel sizes, e.g. dp=2,tp=8,ep=2,esp=8 (keys dp tp ep esp pp cp; left out: "
                   "the model's own when run on its testbed, else derived)");
  sub_->add_option("--seq-len", seq_len_, "override the model's sequence length")
      ->check(CLI::Range(int64_t{1}, core::kMaxSeqLen));
  sub_->add_option("--micro-batch", micro_batch_, "override the model's micro-batch size")
      ->check(CLI::Range(int64_t{1}, core::kMaxMicroBatch));
  sub_->add_option("--zero", zero_stage_, "ZeRO stage for the memory estimate (0-3)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  sub_->add_option("--recompute", recompute_, "activation recomputation for the memory estimate")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  sub_->add_flag("--json", json_,
                 "print one JSON object: {strategies: [{name, forward_ms, backward_ms, params, "
                 "...}], recommended}");
}

namespace {

// Knob values for the table: numbers to 4 significant digits, strings bare.
std::string format_value(const nlohmann::json& v) {
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ",") + format_value(x);
    return "[" + out + "]";
  }
  return v.dump();
}

void print_table(const plan::Plan& p, const plan::PlanInput& in, std::ostream& out) {
  const auto& par = in.parallel;
  char line[512];
  out << "model " << in.model.name << " on cluster " << in.cluster.name << " ("
      << in.cluster.world_size() << " devices), parallel dp=" << par.dp << " tp=" << par.tp
      << " ep=" << par.ep << " esp=" << par.esp << " edp=" << par.edp << " pp=" << par.pp
      << " cp=" << par.cp << "; seq_len " << in.model.seq_len << ", micro_batch "
      << in.model.micro_batch << "\n";
  out << "one MoE layer, one micro-batch:\n";
  std::snprintf(line, sizeof line, "%-14s %11s %11s %11s %10s  %s\n", "strategy", "forward_ms",
                "backward_ms", "total_ms", "memory_GB", "knobs");
  out << line;
  for (const auto& s : p.strategies) {
    std::snprintf(line, sizeof line, "%-14s %11.3f %11.3f %11.3f %10.2f  ", s.name.c_str(),
                  s.forward_s * 1e3, s.backward_s * 1e3, s.total_s() * 1e3, s.memory_bytes / 1e9);
    std::string knobs;
    for (const auto& [k, v] : s.params.items())
      knobs += (knobs.empty() ? "" : " ") + k + "=" + format_value(v);
    const bool fits = s.memory_bytes <= in.cluster.device.memory_bytes;
    out << line << (fits ? "" : "[exceeds device memory] ") << knobs << "\n";
  }
  for (const auto& s : p.skipped) out << "skipped " << s.name << ": " << s.reason << "\n";
  const auto& best = *std::find_if(p.strategies.begin(), p.strategies.end(),
                                   [&](const auto& s) { return s.name == p.recommended; });
  std::snprintf(
      line, sizeof line, "recommended: %s (%.3f ms per MoE layer, %.2fx the baseline's speed)\n",
      best.name.c_str(), best.total_s() * 1e3, p.strategies.front().total_s() / best.total_s());
  out << line;
  if (best.memory_bytes > in.cluster.device.memory_bytes)
    out << "warning: no estimate counts offloading; the memory above exceeds the device's "
        << in.cluster.device.memory_bytes / 1e9 << " GB (try --zero 3 or --recompute full)\n";
}

}  // namespace

int PlanCommand::run(std::ostream& out) const {
  for (const auto& [flag, value] :
       {std::pair{"--model", &model_}, {"--cluster", &cluster_}, {"--parallel", &parallel_}})
    if (sub_->count(flag) && value->empty()) throw Error(flag, "empty value");
  const ModelSetup setup = resolve_model_setup(model_, cluster_, parallel_, seq_len_, micro_batch_);
  plan::PlanInput in;
  in.model = setup.model;
  in.cluster = setup.cluster;
  in.parallel = setup.parallel;
  in.zero_stage = zero_stage_;
  in.recompute = recompute_;
  plan::Plan p = plan::make_plan(in);
  if (json_)
    out << plan::plan_to_json(p, in).dump(2) << "\n";
  else
    print_table(p, in, out);
  return 0;
}

}  // namespace moecomm::cli

#include "cli/plan_command.h"

#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>

#include "cli/flag_checks.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "core/model_setup.h"
#include "core/presets.h"
#include "plan/layout_search.h"
#include "plan/search_planner.h"
#include "sched/strategy.h"

namespace moecomm::cli {

PlanCommand::PlanCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "plan",
      "Recommend a strategy: every method (baseline EP, hierarchical A2A, MoNTA O1/O2/O3,\n"
      "FSMoE, Lina, HybridEP) with its knobs from its paper's model, priced by simulating one\n"
      "training step (as `moecomm sim`), then a search over the knobs around them; the paper\n"
      "model's estimate is shown beside each simulated time.");
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
  sub_->add_option("--seq-len", seq_len_,
                   "override the model's sequence length (default: the model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxSeqLen));
  sub_->add_option("--micro-batch", micro_batch_,
                   "override the model's micro-batch size (default: the model's)")
      ->check(CLI::Range(int64_t{1}, core::kMaxMicroBatch));
  sub_->add_option("--layers", layers_,
                   "MoE transformer blocks per simulated step (as sim --layers)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  budget_s_ = plan::kDefaultSearchBudgetS;
  sub_->add_option("--budget-s", budget_s_,
                   "wall-clock seconds the plan may take: the knob search stops when they are "
                   "spent (the method rows are always priced; 0: those only); progress goes to "
                   "stderr. With --search-layout: " +
                       std::to_string(int(plan::kDefaultLayoutBudgetS)) +
                       " s unless given; no layout's knob search starts after they are spent")
      ->capture_default_str()
      ->check(finite_range(0.0, 86400.0));
  sub_->add_flag("--search-layout", search_layout_,
                 "search the parallel layout too: every tp, cp, pp, dp (dense) and esp, ep (MoE) "
                 "of the cluster's devices, the micro-batch count M for --global-batch and the "
                 "pipeline schedule (1f1b, interleaved:V); layouts over device memory are "
                 "dropped, the rest ranked by an analytical estimate (MoNTA's link priority "
                 "breaking near-ties) and the best --max-layouts priced by the knob search. " +
                     std::string(plan::kLayoutPricing) + ". " + plan::kMfuFormula);
  sub_->add_option("--global-batch", global_batch_,
                   "sequences per training step (no default: required with --search-layout): M "
                   "= global batch / (dp x micro_batch)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  max_layouts_ = plan::kDefaultMaxLayouts;
  sub_->add_option("--max-layouts", max_layouts_,
                   "with --search-layout: parallel configurations whose knob search is simulated")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub_->add_option("--zero", zero_,
                   "ZeRO stage of every candidate (the strategy knob zero): model states in the "
                   "memory estimate (0-3)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  sub_->add_option("--recompute", recompute_, "activation recomputation for the memory estimate")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "selective", "full"}));
  sub_->add_flag("--json", json_,
                 "print one JSON object: {strategies: [{name, forward_ms, backward_ms, total_ms, "
                 "strategy, parallel, model_estimate, ...}], recommended, search}");
}

namespace {

// "key=value" items of a strategy string, by key.
std::map<std::string, std::string> knob_values(const sched::Strategy& s) {
  std::map<std::string, std::string> out;
  std::stringstream in(sched::to_string(s));
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

// The knobs that differ from the baseline's with the plan's zero ("-" when none).
std::string knob_summary(const sched::Strategy& s, int zero) {
  std::string out;
  sched::Strategy baseline;
  baseline.zero = zero;
  const auto base = knob_values(baseline);
  for (const auto& [knob, value] : knob_values(s)) {
    if (knob == "name") continue;
    const auto b = base.find(knob);
    if (b == base.end() || b->second != value) out += (out.empty() ? "" : " ") + knob + "=" + value;
  }
  return out.empty() ? "-" : out;
}

// The knobs that differ from the baseline's, and the EP size when it moved.
std::string knob_summary(const plan::PlanRow& r, const core::ParallelConfig& in, int zero) {
  std::string out = knob_summary(r.candidate.strategy, zero);
  if (out == "-") out.clear();
  if (r.candidate.parallel.ep != in.ep)
    out += (out.empty() ? "" : " ") + std::string("ep=") + std::to_string(r.candidate.parallel.ep);
  return out.empty() ? "-" : out;
}

void print_rows(const plan::Plan& p, const plan::PlanInput& in, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line, "%-12s %11s %11s %10s %10s %14s  %s\n", "strategy", "forward_ms",
                "backward_ms", "step_ms", "model_ms", "memory_GB/rank", "knobs");
  out << line;
  for (const auto& r : p.rows) {
    char model[32] = "-";
    if (r.model) std::snprintf(model, sizeof model, "%.3f", r.model->total_s() * 1e3);
    std::snprintf(line, sizeof line, "%-12s %11.3f %11.3f %10.3f %10s %14.2f  ", r.name.c_str(),
                  r.simulated.forward_s * 1e3, r.simulated.backward_s * 1e3,
                  r.simulated.step_s * 1e3, model, r.memory_bytes / 1e9);
    out << line << (r.fits(in.cluster) ? "" : "[exceeds device memory] ")
        << knob_summary(r, in.parallel, in.zero) << "\n";
  }
  for (const auto& s : p.skipped) out << "skipped " << s.name << ": " << s.reason << "\n";
}

// sim_args: what `moecomm sim` needs besides the row's strategy and parallel sizes to price it
// as the plan did (--model, --cluster, and the overrides the plan was given).
void print_table(const plan::Plan& p, const plan::PlanInput& in, const std::string& sim_args,
                 std::ostream& out) {
  const auto& par = in.parallel;
  char line[512];
  out << "model " << in.model.name << " on cluster " << in.cluster.name << " ("
      << in.cluster.world_size() << " devices), parallel dp=" << par.dp << " tp=" << par.tp
      << " ep=" << par.ep << " esp=" << par.esp << " edp=" << par.edp << " pp=" << par.pp
      << " cp=" << par.cp << "; seq_len " << in.model.seq_len << ", micro_batch "
      << in.model.micro_batch << "\n";
  out << "ms of the simulated training step (as `moecomm sim`): " << p.layers
      << " MoE block(s) on every rank, forward, backward and gradient sync, until the last rank "
         "ends\n"
      << "model_ms: the paper model's estimate of one MoE layer's forward and backward (its own "
         "model, not the simulation)\n";
  print_rows(p, in, out);
  std::snprintf(line, sizeof line, "search: %d candidates simulated (%d refused) in %.2f s, %s\n",
                p.search.candidates, p.search.refused, p.search.wall_s,
                p.search.converged ? "converged" : "budget spent (raise --budget-s to go on)");
  out << line;
  if (p.shortfall) {
    out << "nothing fits the device's memory: no row is recommended; "
        << plan::shortfall_text(*p.shortfall)
        << " (try --zero 3, --recompute full, or more devices)\n";
    return;
  }
  const plan::PlanRow& best = p.row(p.recommended);
  const plan::PlanRow& base = p.rows.front();
  std::snprintf(line, sizeof line,
                "recommended: %s (%.3f ms per step, %.2fx the %s's speed; the paper models "
                "rank %s first)\n",
                best.name.c_str(), best.simulated.step_s * 1e3,
                base.simulated.step_s / best.simulated.step_s, base.name.c_str(),
                p.estimates.fastest.c_str());
  out << line;
  out << "  moecomm sim " << sim_args << " --parallel "
      << plan::parallel_string(best.candidate.parallel) << " --layers " << p.layers
      << " --strategy " << sched::to_string(best.candidate.strategy) << "\n";
}

void print_layouts(const plan::LayoutSearch& s, const plan::PlanInput& in, int64_t global_batch,
                   std::ostream& out) {
  char line[512];
  out << "model " << in.model.name << " on cluster " << in.cluster.name << " ("
      << in.cluster.world_size() << " devices, " << in.cluster.device.memory_bytes / 1e9
      << " GB each); global batch " << global_batch << " sequences of " << in.model.seq_len
      << " tokens, micro_batch " << in.model.micro_batch << ", zero " << in.zero << ", recompute "
      << in.recompute << "\n";
  std::snprintf(line, sizeof line,
                "layouts: %d enumerated, %d fit memory, %d parallel configurations simulated "
                "(%d simulations) in %.1f s of a %.1f s budget%s\n",
                s.enumerated, s.fitting, s.simulated, s.simulations, s.wall_s, s.budget_s,
                s.budget_spent
                    ? " (spent: raise --budget-s to simulate more)"
                    : (s.unsimulated > 0 ? " (raise --max-layouts to simulate more)" : ""));
  out << line;
  if (s.shortfall) {
    out << "nothing fits the device's memory: no layout is recommended; "
        << plan::shortfall_text(*s.shortfall)
        << " (try --zero 3, --recompute full, a smaller micro-batch, or more devices)\n";
    return;
  }
  if (s.rows.empty() && s.simulated == 0) {
    out << "no layout was simulated within the budget: no layout is recommended (raise "
           "--budget-s)\n";
    return;
  }
  if (s.rows.empty()) {
    out << "no simulated layout fits the device's memory with the knobs its search found: no "
           "layout is recommended (raise --max-layouts)\n";
    return;
  }
  std::snprintf(line, sizeof line, "%-38s %6s %-14s %10s %12s %6s %9s  %s\n", "layout", "M",
                "schedule", "step_ms", "tokens/s", "MFU", "mem_GB",
                "knobs (beside the baseline's; --json: the whole strategy)");
  out << line;
  for (const auto& r : s.rows) {
    std::snprintf(line, sizeof line, "%-38s %6lld %-14s %10.2f %12.0f %5.1f%% %9.2f  ",
                  plan::layout_string(r.layout.parallel).c_str(),
                  static_cast<long long>(r.layout.micro_batches),
                  sched::pp_schedule_name(r.layout.pipeline).c_str(), r.step_s * 1e3,
                  r.tokens_per_s, r.mfu * 100, r.memory.total() / 1e9);
    out << line << knob_summary(r.knobs, in.zero) << "\n";
  }
  const auto& best = s.rows.front();
  out << "recommended: " << plan::layout_string(best.layout.parallel)
      << " M=" << best.layout.micro_batches << " " << sched::pp_schedule_name(best.layout.pipeline)
      << "\n";
  out << "pricing: " << plan::kLayoutPricing << "\n";
  out << plan::kMfuFormula << "\n";
}

}  // namespace

int PlanCommand::run(std::ostream& out, std::ostream& err) const {
  for (const auto& [flag, value] :
       {std::pair{"--model", &model_}, {"--cluster", &cluster_}, {"--parallel", &parallel_}})
    if (sub_->count(flag) && value->empty()) throw Error(flag, "empty value");
  if (search_layout_ && sub_->count("--parallel"))
    throw Error("--parallel", "--search-layout searches the parallel sizes: leave --parallel out");
  if (search_layout_ && global_batch_ == 0)
    throw Error("--global-batch", "--search-layout needs the sequences per step (--global-batch)");
  if (search_layout_ && sub_->count("--layers"))
    throw Error("--layers",
                "--search-layout simulates one block per pipeline stage and scales it "
                "by the model's layers: leave --layers out");
  if (!search_layout_)
    for (const char* flag : {"--global-batch", "--max-layouts"})
      if (sub_->count(flag)) throw Error(flag, "only with --search-layout");
  const core::ModelSetup setup =
      core::resolve_model_setup(model_, cluster_, parallel_, seq_len_, micro_batch_);
  plan::PlanInput in;
  in.model = setup.model;
  in.cluster = setup.cluster;
  in.parallel = setup.parallel;
  in.zero = zero_;
  in.recompute = recompute_;
  if (search_layout_) {
    plan::LayoutSearchOptions lo;
    lo.global_batch = global_batch_;
    lo.budget_s = sub_->count("--budget-s") ? budget_s_ : plan::kDefaultLayoutBudgetS;
    lo.max_layouts = max_layouts_;
    lo.progress = [&err](const std::string& line) { err << line << std::flush; };
    const plan::LayoutSearch s = plan::search_layouts(in, lo);
    if (json_)
      out << dump_json(plan::layout_search_to_json(s, in, global_batch_)) << "\n";
    else
      print_layouts(s, in, global_batch_, out);
    return 0;
  }
  plan::SearchOptions options;
  options.layers = layers_;
  options.budget_s = budget_s_;
  options.progress = [&err](const plan::SearchProgress& s) {
    char line[160];
    std::snprintf(line, sizeof line, "plan: %d candidates simulated in %.0f s, best step %.3f ms\n",
                  s.candidates, s.elapsed_s, s.best_step_s * 1e3);
    err << line << std::flush;
  };
  const plan::Plan p = plan::make_plan(in, options);
  if (json_) {
    out << dump_json(plan::plan_to_json(p, in)) << "\n";
    return 0;
  }
  std::string sim_args = "--model " + (model_.empty() ? in.model.name : model_) + " --cluster " +
                         (cluster_.empty() ? in.cluster.name : cluster_);
  if (seq_len_ > 0) sim_args += " --seq-len " + std::to_string(seq_len_);
  if (micro_batch_ > 0) sim_args += " --micro-batch " + std::to_string(micro_batch_);
  print_table(p, in, sim_args, out);
  return 0;
}

}  // namespace moecomm::cli

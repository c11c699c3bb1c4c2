#include "plan/search_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/rank_groups.h"
#include "plan/estimate_params.h"
#include "plan/moe_workload.h"
#include "plan/monta_planner.h"
#include "plan/planned_strategy.h"
#include "plan/search_space.h"

namespace moecomm::plan {

namespace {

using Clock = std::chrono::steady_clock;

// The method rows: the papers' settings, their open knobs planned by their models.
struct Method {
  const char* row;
  const char* strategy;  // --strategy text
};
constexpr Method kMethods[] = {
    {"baseline", "baseline"},
    {"hier-a2a", "hier-a2a"},
    {"monta-o1", "monta-o1"},
    {"monta-o2", "monta-o2"},
    {"monta-o3", "monta-o3"},
    {"fsmoe", "fsmoe"},
    {"lina", "lina"},
    {"hybridep", "hybridep"},
    {"hybridep-sr", "base=hybridep,compression=0.02"},
};

const StrategyEstimate* find_estimate(const ModelEstimates& e, const std::string& name) {
  for (const auto& s : e.strategies)
    if (s.name == name) return &s;
  return nullptr;
}

// Per device: MoNTA Eq. 1 for the candidate's parallel sizes (Lina's packing holds more
// experts) and its recompute_experts, plus the decoded copies of the other members' experts a
// HybridEP domain holds.
// A whole layout (PlanInput::whole) takes the candidate's MoE sizes (Lina's packing).
void set_memory(const PlanInput& in, PlanRow& row) {
  const Candidate& c = row.candidate;
  PlanInput at = in;
  at.parallel = c.parallel;
  if (at.whole) {
    core::ParallelConfig& whole = at.whole->parallel;
    whole.ep = c.parallel.ep;
    whole.esp = c.parallel.esp;
    whole.edp = whole.world() / (whole.pp * whole.esp * whole.ep);
  }
  row.memory = device_memory(at, c.strategy);
  row.memory_bytes = row.memory.total();
  if (c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid) {
    PlanInput stage = in;
    stage.parallel = c.parallel;
    const core::Topology topology(in.cluster);
    const MoeWorkload w = derive_workload(stage, cost::CollectiveModel(topology));
    row.memory_bytes += (c.strategy.hybrid_domain - 1) * w.expert_grad_bytes;
  }
}

std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

// Candidates that fit the device's memory come first, then the faster.
bool better(const PlanRow& a, const PlanRow& b, const core::Cluster& cluster) {
  if (a.fits(cluster) != b.fits(cluster)) return a.fits(cluster);
  return a.simulated.step_s < b.simulated.step_s * (1 - 1e-9);
}

// MoNTA's rows lay context parallelism out by its cluster expansion rule, where the sizes
// fold that way; returns the note.
std::string monta_cp_expansion(core::ParallelConfig& parallel) {
  const core::CpLayout rule = monta_cp_layout(parallel.cp, parallel.ep);
  const std::string why = "cp_layout=" + std::string(core::to_string(rule)) +
                          " by MoNTA's cluster expansion (cp=" + std::to_string(parallel.cp) +
                          (rule == core::CpLayout::kHorizontal ? " < " : " >= ") +
                          "ep=" + std::to_string(parallel.ep) + ")";
  core::ParallelConfig laid = parallel;
  laid.cp_layout = rule;
  try {
    core::build_rank_groups(laid);
  } catch (const Error& e) {
    return why + " does not fold here, kept " + std::string(core::to_string(parallel.cp_layout)) +
           ": " + e.what();
  }
  parallel = laid;
  return why;
}

void add_method_rows(Plan& plan, const PlanInput& in, CandidatePricer& pricer) {
  for (const Method& m : kMethods) {
    PlanRow row;
    row.name = m.row;
    std::string notes;
    row.candidate.strategy = planned_strategy(sched::parse_strategy_knobs(m.strategy, "plan"), in,
                                              plan.estimates, &notes);
    row.candidate.strategy.name = m.row;
    row.candidate.strategy.zero = in.zero;
    row.candidate.parallel = in.parallel;
    for (size_t at = 0, end; (end = notes.find('\n', at)) != std::string::npos; at = end + 1)
      row.notes.push_back(notes.substr(at, end - at));
    if (const StrategyEstimate* e = find_estimate(plan.estimates, m.row)) row.model = *e;
    for (const auto& skip : plan.estimates.skipped)
      if (skip.name == m.row && row.notes.empty())
        row.notes.push_back("no paper-model estimate: " + skip.reason);
    if (in.parallel.cp > 1 && row.name.rfind("monta", 0) == 0)
      row.notes.push_back(monta_cp_expansion(row.candidate.parallel));
    std::string packing;
    if (row.name == "lina")
      if (auto packed = lina_packed_parallel(in, plan.estimates, &packing)) {
        row.candidate.parallel = *packed;
        row.notes.push_back(packing);
      }
    std::string why;
    const auto step = pricer.price(row.candidate, &why);
    if (!step) {
      plan.skipped.push_back({m.row, "the schedule builder refuses it: " + why});
      continue;
    }
    row.simulated = *step;
    set_memory(in, row);
    plan.rows.push_back(std::move(row));
  }
  if (plan.rows.empty()) throw Error("plan", "no strategy can run on this configuration");
}

// Coordinate search: from a seed, try every value of one knob dimension with the others held,
// move to the best, and repeat over the dimensions until a whole pass improves nothing.
class CoordinateSearch {
 public:
  CoordinateSearch(const PlanInput& in, CandidatePricer& pricer, const SearchOptions& options,
                   Clock::time_point start)
      : in_(in), pricer_(pricer), options_(options), start_(start) {}

  // Descends from `seed` into `best` (kept when nothing beats it); false when out of budget.
  bool descend(const PlanRow& seed, PlanRow& best) {
    PlanRow current = seed;
    for (bool improved = true; improved;) {
      improved = false;
      const size_t dimensions = knob_dimensions(current.candidate, in_).size();
      for (size_t d = 0; d < dimensions; ++d) {
        const std::vector<Candidate> values = knob_dimensions(current.candidate, in_)[d];
        for (const Candidate& c : values) {
          if (out_of_budget()) return false;
          const auto step = pricer_.price(c);
          if (!step) continue;
          PlanRow row{"searched", c, *step, 0, {}, std::nullopt, {}};
          set_memory(in_, row);
          if (better(row, current, in_.cluster)) {
            current = std::move(row);
            improved = true;
          }
        }
      }
      report(current);
    }
    if (better(current, best, in_.cluster)) best = current;
    return true;
  }

 private:
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  bool out_of_budget() const { return elapsed() > options_.budget_s; }
  void report(const PlanRow& current) {
    if (!options_.progress || elapsed() < last_report_ + 1) return;
    last_report_ = elapsed();
    options_.progress({pricer_.priced(), current.simulated.step_s, last_report_});
  }

  const PlanInput& in_;
  CandidatePricer& pricer_;
  const SearchOptions& options_;
  Clock::time_point start_;
  double last_report_ = 0;
};

// Searches from every method row, fastest first, while the budget lasts.
void search(Plan& plan, const PlanInput& in, CandidatePricer& pricer, const SearchOptions& o,
            Clock::time_point start) {
  std::vector<const PlanRow*> seeds;
  for (const auto& r : plan.rows) seeds.push_back(&r);
  std::stable_sort(seeds.begin(), seeds.end(),
                   [&](const PlanRow* a, const PlanRow* b) { return better(*a, *b, in.cluster); });
  PlanRow best = *seeds.front();
  CoordinateSearch coordinate(in, pricer, o, start);
  plan.search.converged = true;
  for (const PlanRow* seed : seeds) {
    if (!coordinate.descend(*seed, best)) {
      plan.search.converged = false;
      break;
    }
  }
  if (best.name == "searched") {
    best.notes.push_back("found by the coordinate search from the method rows");
    plan.rows.push_back(std::move(best));
  }
}

nlohmann::json row_to_json(const PlanRow& r, bool fits) {
  nlohmann::json model = nullptr;
  if (r.model)
    model = {{"forward_ms", r.model->forward_s * 1e3},
             {"backward_ms", r.model->backward_s * 1e3},
             {"total_ms", r.model->total_s() * 1e3}};
  return {{"name", r.name},
          {"forward_ms", r.simulated.forward_s * 1e3},
          {"backward_ms", r.simulated.backward_s * 1e3},
          {"total_ms", r.simulated.step_s * 1e3},
          {"memory_GB", r.memory_bytes / 1e9},
          {"fits", fits},
          {"params", r.model ? estimate_params(*r.model) : nlohmann::json::object()},
          {"source", r.model ? r.model->source : "coordinate search, priced by the simulator"},
          {"strategy", sched::to_string(r.candidate.strategy)},
          {"parallel", parallel_string(r.candidate.parallel)},
          {"model_estimate", model},
          {"notes", r.notes}};
}

}  // namespace

nlohmann::json shortfall_to_json(const Shortfall& f) {
  return {{"candidate", f.candidate},
          {"needed_GB", f.needed_bytes() / 1e9},
          {"capacity_GB", f.capacity_bytes / 1e9},
          {"over_GB", f.over_bytes() / 1e9},
          {"stage", f.memory.stage},
          {"weights_GB", f.memory.weights / 1e9},
          {"gradients_GB", f.memory.gradients / 1e9},
          {"optimizer_states_GB", f.memory.optimizer_states / 1e9},
          {"activations_GB", f.memory.activations / 1e9},
          {"other_GB", f.other_bytes / 1e9}};
}

std::string shortfall_text(const Shortfall& f) {
  std::string out = "the least a candidate (" + f.candidate + ") needs is " + gb(f.needed_bytes()) +
                    " per device, " + gb(f.over_bytes()) + " over the device's " +
                    gb(f.capacity_bytes) + ": weights " + gb(f.memory.weights) + ", gradients " +
                    gb(f.memory.gradients) + ", optimizer states " + gb(f.memory.optimizer_states) +
                    ", activations " + gb(f.memory.activations);
  if (f.other_bytes > 0) out += ", decoded expert copies " + gb(f.other_bytes);
  return out + " (pipeline stage " + std::to_string(f.memory.stage) + ")";
}

const PlanRow& Plan::row(const std::string& name) const {
  for (const auto& r : rows)
    if (r.name == name) return r;
  throw Error("plan", "no row named " + name);
}

Plan make_plan(const PlanInput& input, const SearchOptions& options) {
  if (!(options.budget_s >= 0 && std::isfinite(options.budget_s)))
    throw Error("--budget-s", "must be a finite number of seconds >= 0");
  const auto start = Clock::now();
  Plan plan;
  plan.layers = options.layers;
  plan.estimates = estimate_strategies(input);
  CandidatePricer pricer(input, options.layers);
  add_method_rows(plan, input, pricer);
  search(plan, input, pricer, options, start);
  const auto best = std::min_element(
      plan.rows.begin(), plan.rows.end(),
      [&](const PlanRow& a, const PlanRow& b) { return better(a, b, input.cluster); });
  if (best->fits(input.cluster)) {
    plan.recommended = best->name;
  } else {
    const auto least = std::min_element(
        plan.rows.begin(), plan.rows.end(),
        [](const PlanRow& a, const PlanRow& b) { return a.memory_bytes < b.memory_bytes; });
    plan.shortfall =
        Shortfall{least->name, least->memory, least->memory_bytes - least->memory.total(),
                  input.cluster.device.memory_bytes};
  }
  plan.search.candidates = pricer.priced();
  plan.search.refused = pricer.refused();
  plan.search.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan, const PlanInput& in) {
  nlohmann::json rows = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (const auto& r : plan.rows) rows.push_back(row_to_json(r, r.fits(in.cluster)));
  for (const auto& s : plan.skipped) skipped.push_back({{"name", s.name}, {"reason", s.reason}});
  return {
      {"model", in.model.name},
      {"cluster", in.cluster.name},
      {"world", in.cluster.world_size()},
      {"parallel", in.parallel.to_json()},
      {"seq_len", in.model.seq_len},
      {"micro_batch", in.model.micro_batch},
      {"layers", plan.layers},
      {"workload", plan.estimates.workload},
      {"strategies", rows},
      {"skipped", skipped},
      {"recommended",
       plan.recommended.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan.recommended)},
      {"shortfall", plan.shortfall ? shortfall_to_json(*plan.shortfall) : nlohmann::json(nullptr)},
      {"model_fastest", plan.estimates.fastest},
      {"search",
       {{"candidates", plan.search.candidates},
        {"refused", plan.search.refused},
        {"wall_s", plan.search.wall_s},
        {"converged", plan.search.converged}}}};
}

}  // namespace moecomm::plan

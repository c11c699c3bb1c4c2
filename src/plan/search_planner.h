#pragma once
// `moecomm plan`: the search planner of DESIGN.md "The one idea". The papers' analytical
// models (strategy_table.h) seed each method's knobs (planned_strategy.h); every candidate is
// priced by simulating the schedule `moecomm sim` builds for it (candidate_pricer.h); a
// coordinate search from the seeds, one knob dimension at a time (search_space.h), looks for
// faster settings, compositions no paper tries included. The recommendation is the simulated
// best, so `plan` and `sim` give one answer.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/candidate_pricer.h"
#include "plan/strategy_table.h"

namespace moecomm::plan {

// The default wall-clock budget of a plan: `moecomm plan` answers within a second.
inline constexpr double kDefaultSearchBudgetS = 0.8;

struct PlanRow {
  std::string name;  // a method (baseline, hier-a2a, ..., hybridep-sr) or "searched"
  Candidate candidate;
  PricedStep simulated;
  double memory_bytes = 0;                // per device: MoNTA Eq. 1 plus HybridEP's copies
  MemoryBreakdown memory;                 // MoNTA Eq. 1's part of memory_bytes, by kind
  std::optional<StrategyEstimate> model;  // the paper model's estimate of the method
  std::vector<std::string> notes;         // where the planned knobs came from
  bool fits(const core::Cluster& cluster) const {
    return memory_bytes <= cluster.device.memory_bytes;
  }
};

// Why nothing fits: the candidate that needs the least memory per device, and by how much it
// is over the device's.
struct Shortfall {
  std::string candidate;      // the row (or layout) it is
  MemoryBreakdown memory;     // MoNTA Eq. 1 by kind, on its heaviest pipeline stage
  double other_bytes = 0;     // beyond Eq. 1 (HybridEP's decoded expert copies)
  double capacity_bytes = 0;  // the device's memory
  double needed_bytes() const { return memory.total() + other_bytes; }
  double over_bytes() const { return needed_bytes() - capacity_bytes; }
};

// {candidate, needed_GB, capacity_GB, over_GB, stage, weights_GB, gradients_GB,
// optimizer_states_GB, activations_GB, other_GB}.
nlohmann::json shortfall_to_json(const Shortfall& shortfall);
// One line: "the least a candidate (NAME) needs is X GB per device, Y GB over the device's Z GB:
// weights .., gradients .., optimizer states .., activations .. (pipeline stage s)".
std::string shortfall_text(const Shortfall& shortfall);

struct SearchStats {
  int candidates = 0;  // distinct candidates simulated, the method rows included
  int refused = 0;     // of which the schedule builder refused (knobs the layout cannot run)
  double wall_s = 0;
  bool converged = false;  // false: the budget ran out before a pass improved nothing
};

struct SearchProgress {
  int candidates = 0;
  double best_step_s = 0;
  double elapsed_s = 0;
};

struct SearchOptions {
  int layers = 1;  // MoE blocks per simulated step, as `sim --layers`
  // Wall-clock seconds the whole plan may take; the search stops when they are spent (the
  // method rows are priced in any case). 0: the method rows only.
  double budget_s = kDefaultSearchBudgetS;
  // Called about once a second while the search runs.
  std::function<void(const SearchProgress&)> progress;
};

struct Plan {
  // The methods that apply, in table order, then "searched" when the search found a faster
  // candidate than every method row.
  std::vector<PlanRow> rows;
  std::vector<SkippedStrategy> skipped;
  // The simulated fastest row that fits the device's memory; empty when none fits, and then
  // shortfall says what is over.
  std::string recommended;
  std::optional<Shortfall> shortfall;
  ModelEstimates estimates;
  SearchStats search;
  int layers = 1;                                     // MoE blocks per simulated step
  const PlanRow& row(const std::string& name) const;  // throws moecomm::Error when absent
};

// Throws moecomm::Error on a bad input (as estimate_strategies) or options (layers < 1,
// budget < 0 or not finite).
Plan make_plan(const PlanInput& input, const SearchOptions& options = {});
// {model, cluster, world, parallel, seq_len, micro_batch, layers, workload, strategies: [{name,
// forward_ms, backward_ms, total_ms, memory_GB, fits, params, source, strategy, parallel,
// model_estimate: {forward_ms, backward_ms, total_ms} | null, notes}], skipped, recommended
// (null when nothing fits), shortfall (null unless nothing fits), model_fastest, search:
// {candidates, refused, wall_s, converged}}.
nlohmann::json plan_to_json(const Plan& plan, const PlanInput& input);

}  // namespace moecomm::plan

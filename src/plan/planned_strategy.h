#pragma once
// A strategy whose tunable knobs come from its paper's analytical model (DESIGN.md "The one
// idea": "Planners choose knob values from the papers' analytical models"): `moecomm sim
// --strategy monta-o2` simulates the N that `moecomm plan` computes, not a fixed default.
#include <optional>
#include <string>
#include <vector>

#include "plan/strategy_table.h"
#include "sched/strategy.h"

namespace moecomm::plan {

// Runs estimate_strategies(input) when the parsed strategy's method (its name or base) has
// knobs the text left unset, and fills them from that method's estimate:
// - monta-o2, monta-o3: chunks_fwd = chunks_bwd = N (MoNTA Algorithms 1-2);
// - fsmoe: chunks_fwd and chunks_bwd = the pipeline degree r of each phase (FSMoE Sec. 4-5);
//   grad_partitions stays the named default (the estimate gives per-layer bytes, not a piece
//   count);
// - lina: grad_partitions = the micro-ops of the largest synchronized gradient tensor at the
//   estimate's micro-op size (Lina Sec. 4.2), capped at sched::kMaxGradPartitions;
// - hybridep: hybrid_levels and hybrid_domain from the per-level domain sizes, compression =
//   1 / SR (HybridEP); with compression given below 1, the domains of the SR-compressed row
//   (hybridep-sr).
// Knobs in parsed.explicit_knobs are never changed; a method the planner skipped keeps its
// named defaults. `notes` (when given) gets one line per knob, each ending in '\n', saying
// where the value came from or why the default stayed. Other methods and bare knobs are
// returned unchanged without running the planner. Throws what estimate_strategies throws.
sched::Strategy planned_strategy(const sched::ParsedStrategy& parsed, const PlanInput& input,
                                 std::string* notes = nullptr);
// The knobs of the parsed strategy's method that planned_strategy fills (those the text left
// unset), in the planner's order; empty for methods and bare knobs it does not plan.
std::vector<std::string> open_planned_knobs(const sched::ParsedStrategy& parsed);
// The same from the estimates already made for `input` (estimate_strategies(input)).
sched::Strategy planned_strategy(const sched::ParsedStrategy& parsed, const PlanInput& input,
                                 const ModelEstimates& estimates, std::string* notes = nullptr);

// Lina Sec. 4.2's expert packing as the lina estimate chose it: `input`'s parallel sizes with
// the EP size its A2A runs over (edp grows). nullopt when the estimate keeps the EP size or
// skipped Lina. `note` (when given) gets where the size came from, without a newline.
std::optional<core::ParallelConfig> lina_packed_parallel(const PlanInput& input,
                                                         const ModelEstimates& estimates,
                                                         std::string* note = nullptr);

}  // namespace moecomm::plan

#pragma once
// A paper model's estimate as the "params" object of `moecomm plan --json`: its knobs by their
// sched::Strategy names (as --strategy spells them) and its figures, times in ms.
#include <nlohmann/json.hpp>

#include "plan/strategy_table.h"
#include "sched/strategy.h"

namespace moecomm::plan {

// The knobs of `knobs` that differ from the baseline strategy's (sched::Strategy{}), as JSON
// values: numbers and booleans as such, enums by their --strategy spelling, hybrid_levels as
// an array. The name is left out.
nlohmann::json knob_changes(const sched::Strategy& knobs);

// knob_changes(e.knobs) and e's figures: a2a_ms; nodes, ranks_per_node (hier-a2a);
// monta_baseline_a2a_ms, i_minimal_bytes, latency_ms, tokens_per_s, mfu, monta_choice (MoNTA);
// case_forward, chunks_fwd_relaxed (FSMoE); microop_bytes, experts_per_device, ep_group,
// a2a_blocked_ms (Lina); p, allgather_ms, a2a_pairs, allgather_pairs, paper_eq8_hybrid_levels
// (HybridEP).
nlohmann::json estimate_params(const StrategyEstimate& e);

}  // namespace moecomm::plan

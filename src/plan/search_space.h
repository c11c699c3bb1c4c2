#pragma once
// The search planner's neighbourhood: from one candidate, the values each knob dimension can
// take with the others held (DESIGN.md "Strategy" knobs: A2A algorithm, TP dispatch, chunks
// per phase, expert pipelining, copy pipelining, gradient sync and its partitions, HybridEP's
// domains and compression, MoNTA's communication priority, and the EP size that Lina's expert
// packing moves).
#include <vector>

#include "plan/candidate_pricer.h"

namespace moecomm::plan {

// Pipeline degrees tried per phase: MoNTA's N and FSMoE's r rarely pay beyond 32 chunks at
// the sizes the presets hold, and each chunk adds ops (the simulator's cost grows with them).
inline constexpr int kSearchChunks[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
// Gradient micro-ops per layer tensor (Lina, FSMoE): powers of two up to 128.
inline constexpr int kSearchGradPartitions[] = {1, 2, 4, 8, 16, 32, 64, 128};
// HybridEP's SR compression tried beside none: the paper's 50x (Sec. V-E).
inline constexpr double kSearchCompression = 0.02;

// One group per knob dimension: the candidates that differ from `from` in that dimension
// only (values the layout cannot run are left out where known; the pricer refuses the rest).
// The name of every returned strategy is "searched".
std::vector<std::vector<Candidate>> knob_dimensions(const Candidate& from, const PlanInput& input);

}  // namespace moecomm::plan

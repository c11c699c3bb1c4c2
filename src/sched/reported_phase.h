#pragma once
// Which reported phase an op's time counts toward: the one rule both the simulator's phase
// times (sim/phase_times.cpp) and the runtime's step report (rt/scheduled_train.cpp) apply,
// so a measured phase and its prediction add up the same ops.
#include "sched/op.h"

namespace moecomm::sched {

enum class ReportedPhase : uint8_t { kNone, kTokenForward, kTokenBackward, kGradSync };

// The token path's and NetMoE's collectives count in their phase; gradient AllReduces in the
// gradient sync. HybridEP's expert transfers run on the copy stream beside the whole step and
// count in no phase but the step; so do compute, copies and the dense part's collectives.
inline ReportedPhase reported_phase(const Op& op, const Label& label) {
  if (!is_collective(op.kind)) return ReportedPhase::kNone;
  switch (family(label.role)) {
    case OpFamily::kTokenPath:
    case OpFamily::kPlacement:
      return label.phase == Phase::kBackward ? ReportedPhase::kTokenBackward
                                             : ReportedPhase::kTokenForward;
    case OpFamily::kGradSync:
      return ReportedPhase::kGradSync;
    default:
      return ReportedPhase::kNone;
  }
}

}  // namespace moecomm::sched

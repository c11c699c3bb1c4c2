#pragma once
// The phases `moecomm bench` measures, read off a simulated step so the two line up: per rank, the
// wall time during which at least one op of a phase runs (the union of their intervals: pipelined
// chunks in flight together count once), averaged over ranks. The runtime measures the same unions
// (rt/scheduled_train.cpp): an op counts from when the rank entered the call (a rank that arrives
// first waits inside the collective for its peers). Lina's gate waits outside the call
// (sched/policy.h): a gradient micro-op counts from its start, and a token collective that reached
// the gate while a micro-op ran on its rank from that micro-op's end (OpTiming::gated_until).
#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::sim {

struct PhaseTimes {
  // By sched::reported_phase: the token path's and NetMoE's collectives in each phase, and the
  // gradient AllReduces.
  double token_fwd_s = 0;
  double token_bwd_s = 0;
  double grad_sync_s = 0;
  double iteration_s = 0;  // the makespan
};

PhaseTimes phase_times(const sched::Schedule& schedule, const SimResult& result);

}  // namespace moecomm::sim

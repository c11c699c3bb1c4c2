#pragma once
// The scheduling policies all three executors obey (DESIGN.md "One schedule, three executors"):
// the simulator in virtual time (sim/simulator.cpp), the runtime for real (rt/executor.cpp),
// moecomm.torch through the schedule binding (ScheduleOp.yields_to_traffic and
// waits_for_micro_ops, read by moecomm/torch/runner.py's A2AFirstGate).
// Dependencies and stream order (FSMoE's windows among them) are the schedule's own; what
// goes beyond them is described here, once.
#include "sched/op.h"

namespace moecomm::sched {

// Lina's A2A-first gate (ATC '23 Sec. 4.1, strict priority without preemption): a collective
// of priority < 0 (a gradient micro-op, kLinaGradPriority) starts only while no collective of
// priority >= 0 (the A2As) is ready or running on any of its ranks; one of priority >= 0
// starts only while no micro-op runs on its rank ("subsequent operations have to wait until
// the running one finish"). Both hold only for collectives; other ops are never gated.
inline bool yields_to_traffic(const Op& op) {
  return is_collective(op.kind) && op.priority < 0;
}
inline bool waits_for_micro_ops(const Op& op) {
  return is_collective(op.kind) && op.priority >= 0;
}
inline bool yields_to_traffic(const Collective& c) {
  return c.priority < 0;
}

}  // namespace moecomm::sched

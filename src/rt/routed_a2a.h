#pragma once
// An A2A-v run as its routing plan says (sched/a2a_routing.h), whatever the algorithm: each
// step's transfers are point-to-point messages of the blocks they name, so measured and
// predicted traffic agree step by step (the simulator prices the same steps as flows). Every
// member reads message sizes from the full count matrix (exchanged first), so both ends of
// each message know its size and the result equals flat A2A-v exactly.
#include <cstdint>
#include <span>
#include <vector>

#include "rt/collectives.h"
#include "sched/a2a_routing.h"

namespace moecomm::rt {

// Runs `steps` on `comm` (its members are the plan's); counts are allgathered first.
Received<std::byte> routed_all_to_all(const Comm& comm, std::span<const std::byte> send,
                                      std::span<const int64_t> send_counts,
                                      const std::vector<sched::RoutingStep>& steps,
                                      const CallOptions& options);

}  // namespace moecomm::rt

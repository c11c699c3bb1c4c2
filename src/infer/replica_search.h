#pragma once
// The optimal replication of a small instance (replica_balancer.h's problem: every slot
// filled, 1 to D replicas per expert on distinct devices, load w / r per replica): branch
// and bound over the experts, heaviest first, each given a replica count and a set of
// devices. Devices with the same load and free slots are interchangeable for the experts
// still to place, so only one of each such group is tried; a device that would reach the
// bound is never chosen; experts of load 0 are placed last, round-robin, once feasible.
#include <optional>

#include "infer/replica_balancer.h"

namespace moecomm::infer {

// Instances up to this many replica slots are solved exactly by plan_replication, within
// kExactNodes search nodes (about a millisecond; the phase-two re-plan is on the critical
// path).
inline constexpr long long kExactSlots = 12;
inline constexpr long long kExactNodes = 200000;

// A packing whose most loaded device is lighter than `bound` by more than rounding: the
// lightest there is when the search ends within `node_budget` nodes, else the lightest
// found; nullopt when none is found. Same preconditions as balance_replicas.
std::optional<ReplicaPacking> search_replicas(const std::vector<double>& load, int devices,
                                              int slots, double bound, long long node_budget);

}  // namespace moecomm::infer

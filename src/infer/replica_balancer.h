#pragma once
// Replicas of E experts on D devices x S slots that balance the devices' load (Lina Sec. 5.2:
// expert e gets about N pop(e) of the devices, every slot used). An expert of load w with r
// replicas puts w / r on each of r distinct devices; a device's load is the sum over the
// replicas it hosts. Every one of the D S slots holds a replica (all D x E when E < S, since
// a second copy on one device adds nothing), each expert has 1 to D replicas, no device holds
// two of one expert, and the most loaded device is made as light as the heuristic finds:
//
//   counts:  the greedy one (each spare slot to the expert with the largest load per replica,
//            as D'Hondt's rule) and the proportional one (largest-remainder rounding of
//            D S w / sum w, Eq. 1's n_e in slots);
//   packing: longest processing time first (heaviest replica onto the least loaded device
//            that has a free slot and not that expert), then swaps of two replicas that
//            lighten the most loaded device;
//   the better of the two, or, on instances of at most kExactSlots slots, the optimum
//   (replica_search.h).
#include <vector>

namespace moecomm::infer {

// The largest instance taken (plan_replication refuses larger ones by name): replica slots,
// and devices x experts (a device-by-expert table is kept while packing).
inline constexpr long long kMaxReplicaSlots = 1 << 14;   // e.g. 1024 devices x 16
inline constexpr long long kMaxDeviceExperts = 1 << 22;  // e.g. 1024 devices x 4096 experts

struct ReplicaPacking {
  std::vector<std::vector<int>> experts_of_device;  // each ascending
  double max_load = 0;                              // the most loaded device's load
};

// Validated by the caller: devices, slots >= 1, 1 <= experts <= devices x slots, loads >= 0,
// within the limits above.
ReplicaPacking balance_replicas(const std::vector<double>& load, int devices, int slots);

// Replicas placed in all: D S, or D E when fewer experts than slots per device.
long long replica_slots(int experts, int devices, int slots);

// The two replica counts, each summing to `total` (E <= total <= D E), each in [1, D].
// Greedy: D'Hondt (ties: fewer replicas, then lower id). Proportional: floor of the quota
// total w / sum w clamped to [1, D], then slots added by largest remainder or taken from the
// expert whose load per replica stays smallest; empty when sum w = 0 (no quota to round).
std::vector<int> greedy_replica_counts(const std::vector<double>& load, int devices,
                                       long long total);
std::vector<int> proportional_replica_counts(const std::vector<double>& load, int devices,
                                             long long total);

// LPT packing of the replicas `count` (summing to at most devices x slots, each in [1,
// devices]) into devices of `slots` slots, then improving swaps.
ReplicaPacking pack_replicas(const std::vector<double>& load, const std::vector<int>& count,
                             int devices, int slots);

}  // namespace moecomm::infer

#pragma once
// Lina's expert-device mapping for inference (lina.txt Sec. 5.2): popular experts replicated
// on several EP ranks, unpopular ones packed several to a rank. The plan is plain data, the
// same on every rank: devices_of_expert[e] lists the EP ranks hosting a replica of expert e,
// in replica order (replica i of e is devices_of_expert[e][i]).
#include <cstdint>
#include <vector>

namespace moecomm::rt {

using ReplicaPlan = std::vector<std::vector<int>>;  // [E] -> ranks hosting a replica

// Throws moecomm::Error ("replication plan: ...") unless the plan has `experts` entries,
// every expert has at least one rank, ranks are in [0, ranks) and distinct within an expert,
// and no rank hosts more than max_experts_per_device experts (Lina Sec. 6.2's cap on
// swapped-in experts).
void validate_replica_plan(const ReplicaPlan& plan, int experts, int ranks,
                           int max_experts_per_device);

// The experts the plan puts on `rank`, ascending.
std::vector<int> experts_on(const ReplicaPlan& plan, int rank);

// Plain expert parallelism (the baseline MoeLayer's placement): expert e on rank e / (E / P).
// E must be a multiple of P.
ReplicaPlan identity_plan(int experts, int ranks);

// How source rank `src` splits its n rows of an expert among k replicas: contiguous pieces,
// piece i for replica i, sizes floor(n / k) or ceil(n / k) ("how many tokens each replica
// should handle to balance the load", Sec. 6.2). The n % k larger pieces start at replica
// src % k, so the remainders of different sources land on different replicas.
std::vector<int> split_rows(int n, int k, int src);

// A 31-bit digest of the plan: ranks compare it in the metadata A2A to catch a plan that
// differs between ranks.
int plan_fingerprint(const ReplicaPlan& plan);

}  // namespace moecomm::rt

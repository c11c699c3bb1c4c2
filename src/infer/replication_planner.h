#pragma once
// Lina Sec. 5.2, two-phase scheduling of expert replicas for one MoE layer in inference.
//
// Phase one, from the estimated popularity pop(e) (popularity_estimator.h): expert e needs
// n_e = N pop(e) devices (Eq. 1). The estimated experts share round(N sum pop) of the N
// devices (all N when every expert has an estimate); each starts with one replica and,
// while first-fit-decreasing (FFD) still packs all replicas into that many devices,
// the expert with the largest load per replica gets one more (so replicas follow
// popularity). The replicas (each n_e / r_e of a device) are then packed by FFD into
// devices of capacity 1, at most max_experts_per_device experts each, using as few
// devices as possible; a replica that fits nowhere goes to the least loaded device with
// room. Experts with no estimate are spread round-robin over the devices left free, or,
// when none is, each goes to the least loaded device with room (fewest experts, then
// lowest index: deterministic where Lina picks at random).
//
// Phase two, after the gate: if the actual top-2k experts are not the estimated ones
// (same_top_experts), the plan is recomputed with the actual popularity by the same logic.
#include <cstdint>
#include <vector>

namespace moecomm::infer {

struct ReplicationPlan {
  // For each expert, the devices hosting one of its replicas (ascending): an expert on
  // several devices is replicated, a device hosting several experts is packed.
  std::vector<std::vector<int>> devices_of_expert;

  // For each of `devices` devices, the experts it hosts (ascending).
  std::vector<std::vector<int>> experts_of_device(int devices) const;
};

struct ReplicationOptions {
  int devices = 1;
  int max_experts_per_device = 4;  // Lina Sec. 6.2 bounds weight swapping; Sec. 7.3 uses 4
};

// Phase one. popularity: one share per expert, each >= 0 and summing to at most 1 (0: no
// estimate). Throws Error naming the field on devices < 1, max_experts_per_device < 1,
// more experts than devices x max_experts_per_device, or a popularity that is negative,
// not finite, or sums above 1.
ReplicationPlan plan_replication(const std::vector<double>& popularity,
                                 const ReplicationOptions& options);

struct PhaseTwo {
  bool replanned = false;  // the actual top-2k differed from the estimated one
  ReplicationPlan plan;    // phase one's plan when not replanned
};

// Phase two: compares the top-2k experts of `estimated` and of the actual token counts;
// identical: keeps `phase_one`; else re-plans with the actual popularity.
PhaseTwo fine_tune(const ReplicationPlan& phase_one, const std::vector<double>& estimated,
                   const std::vector<int64_t>& actual_counts, int top_k,
                   const ReplicationOptions& options);

// Token-slots each device processes under `plan`: an expert's tokens are split evenly
// among its replicas (Sec. 6.2: "how many tokens each replica should handle to balance
// the load"). Throws Error if the plan and counts disagree on experts, an expert has no
// replica, or a device index is outside [0, devices).
std::vector<double> device_loads(const ReplicationPlan& plan, const std::vector<int64_t>& counts,
                                 int devices);

// The perfectly balanced load of Sec. 7.3.1's "Ideal": all token-slots / devices.
double ideal_load(const std::vector<int64_t>& counts, int devices);

}  // namespace moecomm::infer

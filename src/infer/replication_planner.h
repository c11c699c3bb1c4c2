#pragma once
// Lina Sec. 5.2, two-phase scheduling of expert replicas for one MoE layer in inference.
//
// Phase one, from the estimated popularity pop(e) (popularity_estimator.h): expert e needs
// n_e = N pop(e) devices (Eq. 1), so popular experts are replicated on proportionally more
// devices and unpopular ones packed onto fewer. With S = max_experts_per_device slots per
// device, all N S slots hold a replica (replica_balancer.h): the replica counts follow
// popularity (D'Hondt's greedy, or n_e in slots rounded by largest remainder, whichever packs
// better), an expert's tokens are split evenly over its replicas, no device holds two of one
// expert, and the replicas are packed so that the most loaded device is as light as found
// (longest first onto the least loaded device, then improving swaps; exact on small
// instances). Lina packs by first-fit decreasing to use few devices; packing for the most
// loaded device instead is what balances the layer, which is the purpose of Sec. 5.2.
// Experts with no estimate (pop 0) fill the slots the estimated ones leave, one replica
// each at least (Lina spreads them over the free devices).
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
  // Max/mean device load under the popularity the plan was made from (1 is balanced), and
  // that of plain EP (expert_parallel_plan) under the same popularity, side by side; 1 when
  // every load is 0, 0 in a plan built by hand.
  double max_over_mean = 0, ep_max_over_mean = 0;

  // For each of `devices` devices, the experts it hosts (ascending).
  std::vector<std::vector<int>> experts_of_device(int devices) const;
};

struct ReplicationOptions {
  int devices = 1;
  int max_experts_per_device = 4;  // Lina Sec. 6.2 bounds weight swapping; Sec. 7.3 uses 4
};

// Phase one. popularity: one share per expert, each >= 0 and summing to at most 1 (0: no
// estimate). Every slot is used: each device hosts min(E, max_experts_per_device) experts.
// Throws Error naming the field on devices < 1, max_experts_per_device < 1, more experts
// than devices x max_experts_per_device, or a popularity that is negative, not finite, or
// sums above 1.
ReplicationPlan plan_replication(const std::vector<double>& popularity,
                                 const ReplicationOptions& options);

struct PhaseTwo {
  bool replanned = false;  // the actual top-2k differed from the estimated one
  ReplicationPlan plan;    // phase one's plan when not replanned
};

// Phase two: compares the top-2k experts of `estimated` and of the actual token counts;
// identical: keeps `phase_one`; else re-plans with the actual popularity. Either way the
// plan's max_over_mean and ep_max_over_mean are those under the actual counts.
PhaseTwo fine_tune(const ReplicationPlan& phase_one, const std::vector<double>& estimated,
                   const std::vector<int64_t>& actual_counts, int top_k,
                   const ReplicationOptions& options);

// Token-slots each device processes under `plan`: an expert's tokens are split evenly
// among its replicas (Sec. 6.2: "how many tokens each replica should handle to balance
// the load"). Throws Error if the plan and counts disagree on experts, an expert has no
// replica, or a device index is outside [0, devices).
std::vector<double> device_loads(const ReplicationPlan& plan, const std::vector<int64_t>& counts,
                                 int devices);

// The same, for shares or expected loads (each >= 0) in place of token counts.
std::vector<double> expected_device_loads(const ReplicationPlan& plan,
                                          const std::vector<double>& load, int devices);

// Plain expert parallelism: expert e alone on device floor(e devices / experts), contiguous
// blocks (rt::identity_plan's layout when devices divide the experts). Throws Error on
// devices or experts < 1.
ReplicationPlan expert_parallel_plan(int experts, int devices);

// The most loaded device's load over the mean (1: balanced; 1 when every load is 0).
double max_over_mean(const std::vector<double>& loads);

// The perfectly balanced load of Sec. 7.3.1's "Ideal": all token-slots / devices.
double ideal_load(const std::vector<int64_t>& counts, int devices);

}  // namespace moecomm::infer

#pragma once
// The data-parallel gradient AllReduce of the dense parameters (over dp x cp) and of the
// expert parameters (over edp), by the grad_sync knob: bucketed (one AllReduce per layer as
// soon as its backward made the gradients, sharing links fairly: Lina Fig. 7a), lina (per layer,
// grad_partitions micro-ops of priority -1 against A2As of priority 1) or fsmoe (per layer,
// grad_partitions pieces issued in the next MoE layer's backward window). Under ZeRO-2/3
// (Strategy::zero >= 2) the same buckets travel as ReduceScatters instead, in the same windows
// at the same priorities: each rank keeps only the reduced gradients of the parameters its
// optimizer shard updates (Rajbhandari et al. 2020, "ZeRO", Sec. 5.2). That holds whether or
// not the step ends with the optimizer (LayerSetup::optimizer): it is how the gradients travel.
#include <vector>

#include "sched/build_context.h"

namespace moecomm::sched {

// Priority of Lina's AllReduce micro-ops: the simulator starts a collective of priority < 0
// only while no collective of priority >= 0 runs or is ready on any of its ranks.
inline constexpr int kLinaGradPriority = -1;
inline constexpr int kLinaA2APriority = 1;

// The traffic classes of MoNTA's "Communication priority" besides the DP gradients (which keep
// priority 0, or Lina's micro-op priority).
enum class Traffic { kEp, kPp, kCp };
// comm_priority=monta: EP 3 > PP 2 > CP 1 > DP 0. Otherwise 0, except Lina's A2A-first.
int traffic_priority(const Strategy& strategy, Traffic traffic);

// After layer `layer`'s backward (layers go last to first).
void grad_sync_after_layer(BuildContext& ctx, int layer);
// After the backward of the model chunk's blocks (ctx.layer_begin to layer_end).
void grad_sync_finish(BuildContext& ctx);

// The collective a gradient bucket travels as: AllReduce, or ReduceScatter under ZeRO-2/3.
OpKind grad_sync_kind(const Strategy& strategy);
// The role of a bucket labelled `role` (an AllReduce role) under the strategy's ZeRO stage.
OpRole grad_sync_role(const Strategy& strategy, OpRole role);

// `parts` collectives of bytes / parts each over every group, on the gradient stream after
// `after`, labelled `label` with the partition as chunk (when parts > 1). `label` names the
// AllReduce role (kGradDenseAllReduce, kGradExpertAllReduce); under ZeRO-2/3 they are
// ReduceScatters of the same buffer, labelled with the matching ReduceScatter role.
void grad_sync_parts(BuildContext& ctx, const std::vector<core::RankGroup>& groups, double bytes,
                     int parts, const Frontier& after, const Label& label, int priority);

// Per knob (build_lina.cpp, build_fsmoe.cpp).
void lina_sync_layer(BuildContext& ctx, int layer);
void fsmoe_sync_layer(BuildContext& ctx, int layer, const std::vector<OpId>& window);

}  // namespace moecomm::sched

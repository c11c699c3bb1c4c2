#pragma once
// The data-parallel gradient AllReduce of the dense parameters (over dp x cp) and of the
// expert parameters (over edp), by the grad_sync knob: bucketed (one AllReduce per layer as
// soon as its backward made the gradients, sharing links fairly: Lina Fig. 7a), lina (per layer,
// grad_partitions micro-ops of priority -1 against A2As of priority 1) or fsmoe (per layer,
// grad_partitions pieces issued in the next MoE layer's backward window).
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

// `parts` AllReduces of bytes / parts each over every group, on the gradient stream after
// `after`, labelled `name` with the partition as chunk (when parts > 1).
void allreduce_parts(BuildContext& ctx, const std::vector<core::RankGroup>& groups, double bytes,
                     int parts, const Frontier& after, const Label& label, int priority);

// Per knob (build_lina.cpp, build_fsmoe.cpp).
void lina_sync_layer(BuildContext& ctx, int layer);
void fsmoe_sync_layer(BuildContext& ctx, int layer, const std::vector<OpId>& window);

}  // namespace moecomm::sched

// Lina (ATC '23) Sec. 4.1: the gradient AllReduce split into micro-ops that never share the
// network with an A2A. Each layer's gradients go as grad_partitions micro-ops as soon as they
// exist, with priority -1 against the A2As' 1 (build_dispatch.cpp); the simulator starts one
// only while no A2A runs or waits on its ranks. A2A/FFN micro-op pipelining is the chunks
// knob (build_dispatch.cpp).
#include "sched/build_grad_sync.h"

namespace moecomm::sched {

void lina_sync_layer(BuildContext& ctx, int layer) {
  const LayerGrads& g = ctx.grads[layer];
  const int parts = ctx.strategy.grad_partitions;
  const Label expert{OpRole::kGradExpertAllReduce, layer, Phase::kBackward, -1, "lina"};
  if (!ctx.work.dense_block(layer))  // a dense block has no expert gradients
    grad_sync_parts(ctx, ctx.groups.edp, ctx.work.expert_grad_bytes, parts, single(g.expert_ready),
                    expert, kLinaGradPriority);
  const Label dense{OpRole::kGradDenseAllReduce, layer, Phase::kBackward, -1, "lina"};
  grad_sync_parts(ctx, ctx.groups.dp_cp, ctx.dense_grad_bytes(layer), parts, single(g.dense_ready),
                  dense, kLinaGradPriority);
}

}  // namespace moecomm::sched

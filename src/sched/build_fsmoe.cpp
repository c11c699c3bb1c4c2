// FSMoE (ASPLOS '25) Sec. 5 and Fig. 3d: the gradient AllReduce partitioned into the overlap
// windows of the backward. A layer's gradients (dense over dp x cp, expert over edp) go as
// grad_partitions pieces right after the last dispatch A2A of the next MoE layer to run
// backward, where they overlap its ESP-AllGather/ReduceScatter and expert computations
// ("Gradient-AllReduce is followed by the AlltoAll Dispatch on the last partitioned input").
// The pipeline itself (A2A -> ESP-AG -> experts -> ESP-RS -> A2A per chunk) is the chunks
// knob with tp_dispatch=drop-allgather (build_dispatch.cpp).
#include "sched/build_grad_sync.h"

namespace moecomm::sched {

void fsmoe_sync_layer(BuildContext& ctx, int layer, const std::vector<OpId>& window) {
  const LayerGrads& g = ctx.grads[layer];
  const int parts = ctx.strategy.grad_partitions;
  const Label expert{OpRole::kGradExpertAllReduce, layer, Phase::kBackward, -1, "fsmoe"};
  if (!ctx.work.dense_block(layer))  // a dense block has no expert gradients
    grad_sync_parts(ctx, ctx.groups.edp, ctx.work.expert_grad_bytes, parts,
                    merge({single(g.expert_ready), single(window)}), expert, 0);
  const Label dense{OpRole::kGradDenseAllReduce, layer, Phase::kBackward, -1, "fsmoe"};
  grad_sync_parts(ctx, ctx.groups.dp_cp, ctx.dense_grad_bytes(layer), parts,
                  merge({single(g.dense_ready), single(window)}), dense, 0);
}

}  // namespace moecomm::sched

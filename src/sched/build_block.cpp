#include "sched/build_block.h"

#include "sched/build_dense.h"
#include "sched/build_dispatch.h"
#include "sched/build_hybridep.h"

namespace moecomm::sched {

void build_block_forward(BuildContext& ctx, int layer) {
  ctx.layer = layer;
  if (ctx.strategy.expert_transfer == ExpertTransfer::kHybrid) {
    // The step's micro-batches share the experts the first one gathered (one AllGather per
    // layer and step, as their gradients go home once, after the last micro-batch).
    if (ctx.first_micro_batch) {
      build_hybrid_prefetch(ctx);
      ctx.layer_prefetch[size_t(layer)] = ctx.prefetch;
    } else {
      ctx.prefetch = ctx.layer_prefetch[size_t(layer)];
    }
  }
  build_attention(ctx);
  build_gate(ctx);
  build_moe(ctx);
}

void build_block_backward(BuildContext& ctx, int layer) {
  ctx.layer = layer;
  ctx.prefetch.assign(ctx.world(), kNone);  // the forward's gathered experts are still there
  build_moe(ctx);
  build_gate(ctx);
  ctx.grads[layer].dense_ready = build_attention(ctx);
}

}  // namespace moecomm::sched

#include "sched/build_block.h"

#include "sched/build_dense.h"
#include "sched/build_dispatch.h"
#include "sched/build_ffn.h"
#include "sched/build_hybridep.h"
#include "sched/build_optimizer.h"

namespace moecomm::sched {
namespace {

// The MoE block's FFN part after the gate (forward) or the next block's gradient (backward):
// the shared experts, then the token path beside them; the block goes on once both are done.
void build_moe_ffn(BuildContext& ctx) {
  const Frontier shared = build_shared_experts(ctx);
  build_moe(ctx);
  ctx.ready = merge({ctx.ready, shared});
}

}  // namespace

void build_block_forward(BuildContext& ctx, int layer) {
  ctx.layer = layer;
  zero3_gather_block(ctx, layer);
  if (dense_block(ctx)) {
    build_attention(ctx);
    build_dense_ffn(ctx);
    return;
  }
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
  build_moe_ffn(ctx);
}

void build_block_backward(BuildContext& ctx, int layer) {
  ctx.layer = layer;
  zero3_gather_block(ctx, layer);
  if (dense_block(ctx)) {
    build_dense_ffn(ctx);
  } else {
    ctx.prefetch.assign(ctx.world(), kNone);  // the forward's gathered experts are still there
    build_moe_ffn(ctx);
    build_gate(ctx);
  }
  ctx.grads[layer].dense_ready = build_attention(ctx);
}

}  // namespace moecomm::sched

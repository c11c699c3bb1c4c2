#include "sched/build_grad_sync.h"

namespace moecomm::sched {
namespace {

// Bucketed (the PyTorch DDP / Megatron baseline, Lina Fig. 7a): each layer's gradients are
// one bucket, AllReduced on the gradient stream as soon as the layer's backward has made
// them, at the A2A's priority, so it shares links fairly with the A2As of the layers still
// in backward. Dense over dp x cp, expert over edp.
void bucketed_sync_layer(BuildContext& ctx, int layer) {
  const LayerGrads& g = ctx.grads[layer];
  const Label expert{OpRole::kGradExpertAllReduce, layer, Phase::kBackward, -1, "bucketed"};
  allreduce_parts(ctx, ctx.groups.edp, ctx.work.expert_grad_bytes, 1, single(g.expert_ready),
                  expert, 0);
  const Label dense{OpRole::kGradDenseAllReduce, layer, Phase::kBackward, -1, "bucketed"};
  allreduce_parts(ctx, ctx.groups.dp_cp, ctx.dense_grad_bytes(layer), 1, single(g.dense_ready),
                  dense, 0);
}

}  // namespace

int traffic_priority(const Strategy& s, Traffic t) {
  if (s.comm_priority == CommPriority::kMonta) return 3 - static_cast<int>(t);
  return t == Traffic::kEp && s.grad_sync == GradSync::kLina ? kLinaA2APriority : 0;
}

void allreduce_parts(BuildContext& ctx, const std::vector<core::RankGroup>& groups, double bytes,
                     int parts, const Frontier& after, const Label& label, int priority) {
  for (int p = 0; p < parts; ++p) {
    Label l = label;
    l.chunk = parts == 1 ? -1 : p;
    group_step(ctx, groups, OpKind::kAllReduce, bytes / parts, kGradStream, l, after, priority);
  }
}

void grad_sync_after_layer(BuildContext& ctx, int layer) {
  switch (ctx.strategy.grad_sync) {
    case GradSync::kBucketed:
      return bucketed_sync_layer(ctx, layer);
    case GradSync::kLina:
      return lina_sync_layer(ctx, layer);
    case GradSync::kFsmoe:  // the previous layer's gradients go in this layer's window
      if (layer + 1 < ctx.layer_end)
        fsmoe_sync_layer(ctx, layer + 1, ctx.grads[layer].window);
      return;
  }
}

void grad_sync_finish(BuildContext& ctx) {
  switch (ctx.strategy.grad_sync) {
    case GradSync::kBucketed:
    case GradSync::kLina:
      return;
    case GradSync::kFsmoe:  // the chunk's first layer's gradients have no later window
      return fsmoe_sync_layer(ctx, ctx.layer_begin, std::vector<OpId>(ctx.world(), kNone));
  }
}

}  // namespace moecomm::sched

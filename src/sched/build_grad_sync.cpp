#include "sched/build_grad_sync.h"

namespace moecomm::sched {
namespace {

// Bucketed (the PyTorch DDP / Megatron baseline): one AllReduce of every layer's gradients
// after the backward, dense over dp x cp and expert over edp, on the gradient stream.
void bucketed_sync(BuildContext& ctx) {
  std::vector<Frontier> dense, expert;
  for (const LayerGrads& g : ctx.grads) {
    dense.push_back(single(g.dense_ready));
    expert.push_back(single(g.expert_ready));
  }
  const double layers = static_cast<double>(ctx.grads.size());
  const Label base{"grad.dense.allreduce", -1, Phase::kBackward, -1, "bucketed"};
  allreduce_parts(ctx, ctx.groups.dp_cp, layers * ctx.work.dense_grad_bytes, 1, merge(dense), base,
                  0);
  Label experts = base;
  experts.name = "grad.expert.allreduce";
  allreduce_parts(ctx, ctx.groups.edp, layers * ctx.work.expert_grad_bytes, 1, merge(expert),
                  experts, 0);
}

}  // namespace

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
      return;
    case GradSync::kLina:
      return lina_sync_layer(ctx, layer);
    case GradSync::kFsmoe:  // the previous layer's gradients go in this layer's window
      if (layer + 1 < static_cast<int>(ctx.grads.size()))
        fsmoe_sync_layer(ctx, layer + 1, ctx.grads[layer].window);
      return;
  }
}

void grad_sync_finish(BuildContext& ctx) {
  switch (ctx.strategy.grad_sync) {
    case GradSync::kBucketed:
      return bucketed_sync(ctx);
    case GradSync::kLina:
      return;
    case GradSync::kFsmoe:  // the first layer's gradients have no later window
      return fsmoe_sync_layer(ctx, 0, std::vector<OpId>(ctx.world(), kNone));
  }
}

}  // namespace moecomm::sched

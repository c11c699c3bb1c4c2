#include "sched/build_ffn.h"

namespace moecomm::sched {
namespace {

double phase_factor(const BuildContext& ctx) {
  return ctx.phase == Phase::kBackward ? 2.0 : 1.0;  // input and weight gradients
}

}  // namespace

bool dense_block(const BuildContext& ctx) {
  return ctx.work.dense_block(ctx.layer);
}

void build_dense_ffn(BuildContext& ctx) {
  ctx.ready = compute_step(ctx, ctx.work.dense_ffn_flops * phase_factor(ctx),
                           ctx.label(OpRole::kDenseFfn), ctx.ready);
  ctx.ready = group_step(ctx, ctx.groups.tp, OpKind::kAllReduce, ctx.work.activation_bytes,
                         kTokenStream, ctx.label(OpRole::kDenseFfnTpAllReduce, "tp"), ctx.ready);
}

Frontier build_shared_experts(BuildContext& ctx) {
  if (ctx.setup.model.shared_experts == 0) return ctx.ready;
  const Frontier out = compute_step(ctx, ctx.work.shared_expert_flops * phase_factor(ctx),
                                    ctx.label(OpRole::kSharedExpert), ctx.ready);
  // Off the token stream, which the first A2A of the token path takes next.
  return group_step(ctx, ctx.groups.tp, OpKind::kAllReduce, ctx.work.activation_bytes, kIntraStream,
                    ctx.label(OpRole::kDenseFfnTpAllReduce, "shared-expert"), out);
}

}  // namespace moecomm::sched

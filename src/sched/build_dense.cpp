#include "sched/build_dense.h"

#include "sched/build_grad_sync.h"

namespace moecomm::sched {
namespace {

double phase_factor(const BuildContext& ctx) {
  return ctx.phase == Phase::kBackward ? 2.0 : 1.0;  // input and weight gradients
}

// The stage this phase receives from (forward: previous, backward: next), kNone at the end.
int stage_peer(const BuildContext& ctx, const core::RankGroup& pp, size_t stage, bool receive) {
  const bool forward = ctx.phase == Phase::kForward;
  const bool to_previous = forward == receive;
  if (to_previous) return stage == 0 ? kNone : pp[stage - 1];
  return stage + 1 == pp.size() ? kNone : pp[stage + 1];
}

}  // namespace

std::vector<OpId> build_attention(BuildContext& ctx) {
  // Context parallelism (MoNTA Fig. 11, Llama 3's all-gather CP): the forward gathers the
  // whole sequence's K and V over the CP group before its attention; the backward
  // reduce-scatters their gradients back to their owners after its own.
  const int cp_priority = traffic_priority(ctx.strategy, Traffic::kCp);
  const bool forward = ctx.phase == Phase::kForward;
  if (forward)
    ctx.ready =
        group_step(ctx, ctx.groups.cp, OpKind::kAllGather, ctx.work.cp_kv_bytes, kTokenStream,
                   ctx.label(OpRole::kAttnCpAllGather, "cp"), ctx.ready, cp_priority);
  // QKV and output projections 8 t h^2, scores and context 4 t s h, sharded over TP.
  ctx.ready = compute_step(ctx, ctx.work.attention_flops * phase_factor(ctx),
                           ctx.label(OpRole::kAttention), ctx.ready);
  if (!forward)
    ctx.ready =
        group_step(ctx, ctx.groups.cp, OpKind::kReduceScatter, ctx.work.cp_kv_bytes, kTokenStream,
                   ctx.label(OpRole::kAttnCpReduceScatter, "cp"), ctx.ready, cp_priority);
  // Megatron: the row-parallel output projection (forward) and the column-parallel input
  // (backward) end with an AllReduce of the t x h activations over the TP group.
  ctx.ready = group_step(ctx, ctx.groups.tp, OpKind::kAllReduce, ctx.work.activation_bytes,
                         kTokenStream, ctx.label(OpRole::kAttnTpAllReduce, "tp"), ctx.ready);
  // The block's dense gradients are final once LN1's backward ran, which needs the input
  // gradient summed over the TP group (and the K/V gradients back from the CP group).
  return last_of(ctx.ready);
}

void build_gate(BuildContext& ctx) {
  ctx.ready = compute_step(ctx, ctx.work.gate_flops * phase_factor(ctx), ctx.label(OpRole::kGate),
                           ctx.ready);
}

void build_head(BuildContext& ctx) {
  if (!ctx.setup.lm_head) return;
  const double flops = 2.0 * ctx.work.tokens * ctx.setup.model.hidden *
                       double(ctx.setup.model.vocab_size) * phase_factor(ctx);
  const Label label{OpRole::kLmHead, -1, ctx.phase, -1, ""};
  for (const auto& pp : ctx.groups.pp) {
    const int r = pp.back();
    if (ctx.phase == Phase::kForward && ctx.targets_moved[r] != kNone)
      ctx.ready[r].push_back(ctx.targets_moved[r]);  // NetMoE: the targets of the samples held
    ctx.ready[r] = {ctx.schedule.add_compute(r, kComputeStream, flops, 0, label, ctx.ready[r])};
  }
}

void build_stage_receive(BuildContext& ctx) {
  const int tag = ctx.phase == Phase::kForward ? 0 : 1;
  const Label label{
      ctx.phase == Phase::kForward ? OpRole::kStageRecvActivations : OpRole::kStageRecvGrads, -1,
      ctx.phase, -1, "pp"};
  for (const auto& pp : ctx.groups.pp)
    for (size_t s = 0; s < pp.size(); ++s) {
      const int peer = stage_peer(ctx, pp, s, true);
      if (peer == kNone) continue;
      const OpId recv =
          ctx.schedule.add_recv(pp[s], kTokenStream, peer, ctx.work.activation_bytes, tag, label);
      ctx.schedule.set_priority(recv, traffic_priority(ctx.strategy, Traffic::kPp));
      ctx.ready[pp[s]].push_back(recv);
    }
}

void build_stage_send(BuildContext& ctx) {
  const int tag = ctx.phase == Phase::kForward ? 0 : 1;
  const Label label{
      ctx.phase == Phase::kForward ? OpRole::kStageSendActivations : OpRole::kStageSendGrads, -1,
      ctx.phase, -1, "pp"};
  for (const auto& pp : ctx.groups.pp)
    for (size_t s = 0; s < pp.size(); ++s) {
      const int peer = stage_peer(ctx, pp, s, false);
      if (peer == kNone) continue;
      const OpId send = ctx.schedule.add_send(pp[s], kTokenStream, peer, ctx.work.activation_bytes,
                                              tag, label, ctx.ready[pp[s]]);
      ctx.schedule.set_priority(send, traffic_priority(ctx.strategy, Traffic::kPp));
    }
}

}  // namespace moecomm::sched

#include "sched/build_dense.h"

#include <algorithm>

#include "sched/build_grad_sync.h"
#include "sched/pipeline_order.h"

namespace moecomm::sched {
namespace {

double phase_factor(const BuildContext& ctx) {
  return ctx.phase == Phase::kBackward ? 2.0 : 1.0;  // input and weight gradients
}

// The virtual stage a task of `virtual_stage` exchanges with: forward receives from the
// previous and sends to the next, backward the other way; kNone past the pipeline's ends.
int peer_stage(const BuildContext& ctx, int virtual_stage, int virtual_stages, bool receive) {
  const bool forward = ctx.phase == Phase::kForward;
  const int peer = forward == receive ? virtual_stage - 1 : virtual_stage + 1;
  return peer < 0 || peer >= virtual_stages ? kNone : peer;
}

// One hand-off per pipeline (pp group) between this stage's rank and the peer stage's.
// Returns the op per rank (kNone where the rank has none).
std::vector<OpId> stage_p2p(BuildContext& ctx, int virtual_stage, int virtual_stages,
                            bool receive) {
  std::vector<OpId> ops(size_t(ctx.world()), kNone);
  const int peer_v = peer_stage(ctx, virtual_stage, virtual_stages, receive);
  if (peer_v == kNone) return ops;
  const bool forward = ctx.phase == Phase::kForward;
  const OpRole role =
      forward ? (receive ? OpRole::kStageRecvActivations : OpRole::kStageSendActivations)
              : (receive ? OpRole::kStageRecvGrads : OpRole::kStageSendGrads);
  const Label label{role, -1, ctx.phase, -1, "pp", ctx.micro_batch};
  const int tag =
      stage_tag(ctx.phase, ctx.micro_batch, std::min(virtual_stage, peer_v), virtual_stages);
  for (const auto& pp : ctx.groups.pp) {
    const int stages = static_cast<int>(pp.size());
    const int r = pp[size_t(virtual_stage % stages)], peer = pp[size_t(peer_v % stages)];
    if (!ctx.active(r)) continue;
    const double bytes = ctx.work.activation_bytes;
    const OpId op =
        receive ? ctx.schedule.add_recv(r, kTokenStream, peer, bytes, tag, label, ctx.ready[r])
                : ctx.schedule.add_send(r, kStageSendStream, peer, bytes, tag, label, ctx.ready[r]);
    ctx.schedule.set_priority(op, traffic_priority(ctx.strategy, Traffic::kPp));
    if (receive) ctx.ready[r] = {op};
    ops[size_t(r)] = op;
  }
  return ops;
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
  const Label label{OpRole::kLmHead, -1, ctx.phase, -1, "", ctx.micro_batch};
  for (int r = 0; r < ctx.world(); ++r) {
    if (!ctx.active(r)) continue;
    if (ctx.phase == Phase::kForward && ctx.targets_moved[r] != kNone)
      ctx.ready[r].push_back(ctx.targets_moved[r]);  // NetMoE: the targets of the samples held
    ctx.ready[r] = {ctx.schedule.add_compute(r, kComputeStream, flops, 0, label, ctx.ready[r])};
  }
}

void build_stage_receive(BuildContext& ctx, int virtual_stage, int virtual_stages) {
  stage_p2p(ctx, virtual_stage, virtual_stages, true);
}

std::vector<OpId> build_stage_send(BuildContext& ctx, int virtual_stage, int virtual_stages) {
  return stage_p2p(ctx, virtual_stage, virtual_stages, false);
}

}  // namespace moecomm::sched

#pragma once
// The dense part of a transformer block (attention with Megatron's TP AllReduce, the gate)
// and the hand-off between pipeline stages.
#include <vector>

#include "sched/build_context.h"

namespace moecomm::sched {

// Attention of the current layer and phase (backward: 2x flops); with tp > 1 followed by the
// TP AllReduce of the activations on the token stream. Returns the layer's last ops (backward:
// its dense gradients exist after them: LN1's needs the input gradient summed over TP and CP).
std::vector<OpId> build_attention(BuildContext& ctx);
void build_gate(BuildContext& ctx);
// The LM head of the current phase and micro-batch on the stage's ranks (LayerSetup::lm_head);
// the layer builder calls it on the last pipeline stage's last model chunk.
void build_head(BuildContext& ctx);
// Pipeline parallelism: before a task of virtual stage `virtual_stage` (of `virtual_stages`),
// the stage's ranks receive the micro-batch's activations (forward, from the previous virtual
// stage) or their gradients (backward, from the next) on the token stream; after it, they
// send them on. Nothing at the pipeline's ends. The send does not hold up what follows it on
// the stage; build_stage_send returns it per rank (kNone where a rank sends nothing).
void build_stage_receive(BuildContext& ctx, int virtual_stage, int virtual_stages);
std::vector<OpId> build_stage_send(BuildContext& ctx, int virtual_stage, int virtual_stages);

}  // namespace moecomm::sched

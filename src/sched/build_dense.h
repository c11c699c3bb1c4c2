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
// The LM head of the current phase on the ranks of the last pipeline stage (LayerSetup::lm_head).
void build_head(BuildContext& ctx);
// Pipeline parallelism (pp > 1): before the current phase, a stage receives the activations
// (forward, from the previous stage) or their gradients (backward, from the next) on the token
// stream; after it, it sends them on.
void build_stage_receive(BuildContext& ctx);
void build_stage_send(BuildContext& ctx);

}  // namespace moecomm::sched

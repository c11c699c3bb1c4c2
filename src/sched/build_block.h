#pragma once
// One transformer block of the step: attention, then the block's FFN part (the MoE layer:
// gate, token path, experts), forward or backward, after the context's frontier.
#include "sched/build_context.h"

namespace moecomm::sched {

// Block `layer`'s forward (the phase must be kForward).
void build_block_forward(BuildContext& ctx, int layer);
// Block `layer`'s backward (kBackward); records when its gradients exist in ctx.grads.
void build_block_backward(BuildContext& ctx, int layer);

}  // namespace moecomm::sched

#pragma once
// The FFN parts of real models' blocks besides the routed experts: the dense FFN of the first
// dense_layers blocks (DeepSeek-V3's first three) and the shared experts every token of an
// MoE block runs (DeepSeekMoE), both Megatron MLPs sharded over the TP group.
#include "sched/build_context.h"

namespace moecomm::sched {

// Whether the current block (ctx.layer, the model's global block index) is one of the model's
// first dense_layers blocks.
bool dense_block(const BuildContext& ctx);

// A dense block's FFN in the current phase after the frontier (backward: 2x flops); with
// tp > 1 followed by the TP AllReduce of the t x h activations on the token stream (the
// row-parallel output forward, the column-parallel input's gradient backward).
void build_dense_ffn(BuildContext& ctx);

// An MoE block's shared experts in the current phase (nothing without shared experts): on
// the compute stream after the frontier, then with tp > 1 their TP AllReduce on the
// intra-node stream. Called before build_moe, so that they run while the first A2A is in
// flight and the experts follow them on the compute stream (DeepSeek-V3 Sec. 3.2.2,
// Megatron's --moe-shared-expert-overlap). Returns their output's frontier, which the block's
// next step must also wait for; the frontier itself is left as it was.
Frontier build_shared_experts(BuildContext& ctx);

}  // namespace moecomm::sched

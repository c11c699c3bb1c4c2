#pragma once
// The end of a training step (LayerSetup::optimizer): Adam's update of the parameters a rank
// holds (Kingma & Ba 2015, Alg. 1, in mixed precision as Megatron-LM and ZeRO keep it) and the
// traffic of ZeRO's data-parallel sharding (Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", Sec. 5 and 7.2; Megatron-LM's
// distributed optimizer is ZeRO-1/2 over the same groups).
//
// The parameters a rank holds are what its gradient buckets carry (build_grad_sync.h), one
// element per dtype_bytes: per block it built, its dense shard (LayerSetup::dense_grad_bytes or
// the block's own 4 h^2 / tp + h E, layer_workload.h) and its experts' shards ((E / ep) x
// ffn_gemms h f / esp). The dense part is data-parallel over dp x cp, the experts over edp.
//
// zero=0: Adam on every parameter of the rank. zero=1: Adam states sharded over the groups, so
// Adam runs on 1/d of the parameters (d: the dense or the expert group's size), then the
// updated parameters are AllGathered over the group per bucket. zero=2: the same, after
// gradients that were ReduceScattered (build_grad_sync.h). zero=3: no full parameters at rest
// either: each block's are AllGathered before its forward and again before its backward
// (zero3_gather_block), so the step ends with Adam on the shard and no AllGather.
//
// With M micro-batches the gradients accumulate in full buffers and travel once per step (as
// Megatron's distributed optimizer reduce-scatters them once, after the last micro-batch);
// ZeRO-3's AllGathers run in every micro-batch's forward and backward, since the parameters
// are released after each use. DeepSpeed's stages 2 and 3 reduce every micro-batch's
// gradients instead; that is not modelled.
#include "sched/build_context.h"

namespace moecomm::sched {

// Adam's arithmetic per parameter element, as nn/adam.h runs it: m = b1 m + (1 - b1) g (3),
// v = b2 v + (1 - b2) g^2 (4), the two bias corrections (2), sqrt(v^) + eps (2), m^ / that
// (1), times lr (1), p -= (1).
inline constexpr double kAdamFlopsPerElement = 14;
// Memory traffic per parameter element of one fused Adam pass: the gradient read in the
// model's dtype; the fp32 master weight, m and v (the optimizer states of ZeRO Sec. 3.1's
// K = 12 bytes) read and written; and, when the model's dtype is narrower than fp32, the
// updated weight written back in it (with fp32 the master is the weight). bf16 or fp16: 2 +
// 24 + 2 = 28 bytes; fp32: 4 + 24 = 28.
double adam_bytes_per_element(int64_t dtype_bytes);

// Per rank: the parameter elements it holds (the blocks of its pipeline stage's model chunks,
// split_layers in pipeline_order.h), and those its Adam updates under the strategy's ZeRO
// stage (dense / d_dp_cp + expert / d_edp when zero >= 1).
struct OptimizerShard {
  double dense = 0, expert = 0;              // elements held
  double dense_group = 1, expert_group = 1;  // the sizes their states are sharded over
  double updated() const { return dense / dense_group + expert / expert_group; }
};
std::vector<OptimizerShard> optimizer_shards(const BuildContext& ctx);

// ZeRO-3 (Strategy::zero == 3): block `layer`'s parameters AllGathered over its data-parallel
// groups (dense over dp x cp, experts over edp) on the copy stream before the block's compute
// in the current phase, which waits for them. Prefetched one block ahead (DeepSpeed's
// stage-3 prefetch): the AllGather starts with the previous block of the same phase and
// micro-batch, so it runs beside that block's compute. Nothing otherwise. Call at the start
// of the block, before any of its ops.
void zero3_gather_block(BuildContext& ctx, int layer);

// After grad_sync_finish, when LayerSetup::optimizer: per rank one Adam op ("optimizer", on the
// compute stream, after every op of the rank, as Megatron steps the optimizer once the
// pipeline flushed and the gradients are reduced), priced at kAdamFlopsPerElement and
// adam_bytes_per_element per updated element; then, with zero 1 or 2, the updated parameters
// AllGathered per bucket (zero.param.allgather, gradient stream). Nothing when !optimizer.
void build_optimizer(BuildContext& ctx);

// An upper bound of the ops build_optimizer and zero3_gather_block add to a step, over all
// ranks: per rank and block at most ZeRO-3's 2 AllGathers per phase and micro-batch or
// ZeRO-1/2's 2, and Adam once.
double optimizer_ops_bound(const LayerSetup& setup);

}  // namespace moecomm::sched

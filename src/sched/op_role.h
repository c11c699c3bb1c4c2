#pragma once
// What an op is for, typed (DESIGN.md "One schedule, three executors": executors never match
// names as strings). Builders give every op its role; the simulator, the MPI runtime and
// moecomm.torch bind kernels, buffers and reports by role, and the dotted name
// ("moe.dispatch.a2a") exists only in this header's table, for traces and messages.
#include <cstdint>
#include <optional>
#include <string_view>

namespace moecomm::sched {

enum class OpRole : uint8_t {
  // The dense part of a block and the pipeline.
  kAttention,             // attn
  kAttnCpAllGather,       // attn.cp.allgather: context parallelism's K/V
  kAttnCpReduceScatter,   // attn.cp.reducescatter
  kAttnTpAllReduce,       // attn.tp.allreduce: Megatron's row-parallel output
  kGate,                  // gate
  kLmHead,                // head: the LM head and loss on the last stage
  kStageSendActivations,  // pp.send.activations
  kStageSendGrads,        // pp.send.grads
  kStageRecvActivations,  // pp.recv.activations
  kStageRecvGrads,        // pp.recv.grads
  // The token path of an MoE layer (FSMoE's Dispatch / Expert / Combine, MoNTA's TP drop).
  kDispatchA2A,               // moe.dispatch.a2a
  kDispatchEspAllGather,      // moe.dispatch.esp_allgather
  kDispatchEspAllGatherCopy,  // moe.dispatch.esp_allgather.copy (MoNTA O2/O3 reorder)
  kExpert,                    // moe.expert
  kCombineEspReduceScatter,   // moe.combine.esp_reducescatter
  kCombineEspAllReduce,       // moe.combine.esp_allreduce
  kCombineA2A,                // moe.combine.a2a
  kCombineTpAllGather,        // moe.combine.tp_allgather (MoNTA's AllGather after the drop)
  kCombineTpAllGatherCopy,    // moe.combine.tp_allgather.copy
  // NetMoE's sample placement.
  kPlacementCountsAllGather,   // moe.netmoe.counts_allgather
  kPlacementAuxAllGather,      // moe.netmoe.aux_allgather
  kPlacementSolve,             // moe.netmoe.solve
  kPlacementTargetsAllGather,  // moe.netmoe.targets_allgather
  // HybridEP's expert transfers.
  kExpertTransferAllGather,          // moe.hybrid.expert_allgather
  kExpertTransferGradReduceScatter,  // moe.hybrid.grad_reducescatter
  kExpertTransferSharedAllReduce,    // moe.hybrid.shared_allreduce
  // Gradient synchronization (bucketed, Lina's micro-ops, FSMoE's partitions).
  kGradDenseAllReduce,   // grad.dense.allreduce
  kGradExpertAllReduce,  // grad.expert.allreduce
  // Real models' other sublayers.
  kDenseFfn,              // ffn: a dense (non-MoE) layer's MLP
  kDenseFfnTpAllReduce,   // ffn.tp.allreduce: its row-parallel output
  kSharedExpert,          // shared_expert: the experts every token uses (DeepSeekMoE)
  // The end of the step: ZeRO's sharded gradients and parameters, the optimizer.
  kGradDenseReduceScatter,   // grad.dense.reducescatter (ZeRO-2/3)
  kGradExpertReduceScatter,  // grad.expert.reducescatter (ZeRO-2/3)
  kZeroParamAllGather,       // zero.param.allgather: updated shards (ZeRO-1/2) or weights
                             // before their use (ZeRO-3)
  kOptimizer,                // optimizer: Adam's update of this rank's parameters
};
inline constexpr int kNumOpRoles = 35;

// The part of the step a role belongs to: what reports group, and what an executor must be
// able to run before it accepts a schedule.
enum class OpFamily : uint8_t {
  kDense,           // attention, gate, LM head
  kDenseComm,       // TP and CP collectives of the dense part
  kPipeline,        // stage hand-offs
  kTokenPath,       // dispatch, ESP, experts, combine, TP gather, and their copies
  kPlacement,       // NetMoE's counts, solve, aux sums and targets
  kExpertTransfer,  // HybridEP's expert AllGather, gradient ReduceScatter, shared expert
  kGradSync,        // data-parallel gradient AllReduces (ReduceScatters under ZeRO-2/3)
  kOptimizer,       // the optimizer step and ZeRO's parameter AllGathers
};

std::string_view to_string(OpRole role);  // the dotted name, e.g. "moe.dispatch.a2a"
std::string_view to_string(OpFamily family);
std::optional<OpRole> op_role_from_string(std::string_view name);
OpFamily family(OpRole role);

}  // namespace moecomm::sched

#include "sched/op_role.h"

#include <array>

namespace moecomm::sched {
namespace {

struct RoleInfo {
  OpRole role;
  std::string_view name;
  OpFamily family;
};

// The one table of op names: index = the role's value.
constexpr std::array<RoleInfo, kNumOpRoles> kRoles{{
    {OpRole::kAttention, "attn", OpFamily::kDense},
    {OpRole::kAttnCpAllGather, "attn.cp.allgather", OpFamily::kDenseComm},
    {OpRole::kAttnCpReduceScatter, "attn.cp.reducescatter", OpFamily::kDenseComm},
    {OpRole::kAttnTpAllReduce, "attn.tp.allreduce", OpFamily::kDenseComm},
    {OpRole::kGate, "gate", OpFamily::kDense},
    {OpRole::kLmHead, "head", OpFamily::kDense},
    {OpRole::kStageSendActivations, "pp.send.activations", OpFamily::kPipeline},
    {OpRole::kStageSendGrads, "pp.send.grads", OpFamily::kPipeline},
    {OpRole::kStageRecvActivations, "pp.recv.activations", OpFamily::kPipeline},
    {OpRole::kStageRecvGrads, "pp.recv.grads", OpFamily::kPipeline},
    {OpRole::kDispatchA2A, "moe.dispatch.a2a", OpFamily::kTokenPath},
    {OpRole::kDispatchEspAllGather, "moe.dispatch.esp_allgather", OpFamily::kTokenPath},
    {OpRole::kDispatchEspAllGatherCopy, "moe.dispatch.esp_allgather.copy", OpFamily::kTokenPath},
    {OpRole::kExpert, "moe.expert", OpFamily::kTokenPath},
    {OpRole::kCombineEspReduceScatter, "moe.combine.esp_reducescatter", OpFamily::kTokenPath},
    {OpRole::kCombineEspAllReduce, "moe.combine.esp_allreduce", OpFamily::kTokenPath},
    {OpRole::kCombineA2A, "moe.combine.a2a", OpFamily::kTokenPath},
    {OpRole::kCombineTpAllGather, "moe.combine.tp_allgather", OpFamily::kTokenPath},
    {OpRole::kCombineTpAllGatherCopy, "moe.combine.tp_allgather.copy", OpFamily::kTokenPath},
    {OpRole::kPlacementCountsAllGather, "moe.netmoe.counts_allgather", OpFamily::kPlacement},
    {OpRole::kPlacementAuxAllGather, "moe.netmoe.aux_allgather", OpFamily::kPlacement},
    {OpRole::kPlacementSolve, "moe.netmoe.solve", OpFamily::kPlacement},
    {OpRole::kPlacementTargetsAllGather, "moe.netmoe.targets_allgather", OpFamily::kPlacement},
    {OpRole::kExpertTransferAllGather, "moe.hybrid.expert_allgather", OpFamily::kExpertTransfer},
    {OpRole::kExpertTransferGradReduceScatter, "moe.hybrid.grad_reducescatter",
     OpFamily::kExpertTransfer},
    {OpRole::kExpertTransferSharedAllReduce, "moe.hybrid.shared_allreduce",
     OpFamily::kExpertTransfer},
    {OpRole::kGradDenseAllReduce, "grad.dense.allreduce", OpFamily::kGradSync},
    {OpRole::kGradExpertAllReduce, "grad.expert.allreduce", OpFamily::kGradSync},
    {OpRole::kDenseFfn, "ffn", OpFamily::kDense},
    {OpRole::kDenseFfnTpAllReduce, "ffn.tp.allreduce", OpFamily::kDenseComm},
    {OpRole::kSharedExpert, "shared_expert", OpFamily::kDense},
    {OpRole::kGradDenseReduceScatter, "grad.dense.reducescatter", OpFamily::kGradSync},
    {OpRole::kGradExpertReduceScatter, "grad.expert.reducescatter", OpFamily::kGradSync},
    {OpRole::kZeroParamAllGather, "zero.param.allgather", OpFamily::kOptimizer},
    {OpRole::kOptimizer, "optimizer", OpFamily::kOptimizer},
}};

constexpr bool table_in_order() {
  for (size_t i = 0; i < kRoles.size(); ++i)
    if (static_cast<size_t>(kRoles[i].role) != i) return false;
  return true;
}
static_assert(table_in_order(), "kRoles must list the roles in their enum order");

}  // namespace

std::string_view to_string(OpRole role) {
  return kRoles[static_cast<size_t>(role)].name;
}

OpFamily family(OpRole role) {
  return kRoles[static_cast<size_t>(role)].family;
}

std::optional<OpRole> op_role_from_string(std::string_view name) {
  for (const RoleInfo& r : kRoles)
    if (r.name == name) return r.role;
  return std::nullopt;
}

std::string_view to_string(OpFamily family) {
  switch (family) {
    case OpFamily::kDense:
      return "dense";
    case OpFamily::kDenseComm:
      return "dense_comm";
    case OpFamily::kPipeline:
      return "pipeline";
    case OpFamily::kTokenPath:
      return "token_path";
    case OpFamily::kPlacement:
      return "placement";
    case OpFamily::kExpertTransfer:
      return "expert_transfer";
    case OpFamily::kGradSync:
      return "grad_sync";
    case OpFamily::kOptimizer:
      return "optimizer";
  }
  return "?";
}

}  // namespace moecomm::sched

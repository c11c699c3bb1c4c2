#include "plan/moe_workload.h"

#include "core/error.h"
#include "cost/collective_model.h"

namespace moecomm::plan {

MoeWorkload derive_workload(const PlanInput& in, const cost::CollectiveModel& model) {
  const auto& m = in.model;
  const auto& p = in.parallel;
  MoeWorkload w;
  w.tokens = double(m.micro_batch) * m.seq_len / p.cp;
  // Capacity layout [E, C, M] holds cf x T x k rows; dropless sends T x k on average.
  w.routed_tokens = w.tokens * m.top_k * m.capacity_factor.value_or(1.0);
  w.token_bytes = double(m.hidden) * m.dtype_bytes;
  w.a2a_bytes = w.routed_tokens * w.token_bytes;  // MoNTA Eq. 3 (I = b s h BPE) times k and cf
  // Balanced routing: a rank receives as many rows as it sends and computes its 1/esp of
  // every expert FFN GEMM (2 flops per multiply-add).
  w.expert_flops = 2.0 * w.routed_tokens * m.hidden * m.ffn_hidden * m.ffn_gemms() / p.esp;
  w.dense_grad_bytes =
      (4.0 * m.hidden * m.hidden / p.tp + double(m.hidden) * m.experts) * m.dtype_bytes;
  w.experts_per_rank = double(m.experts) / p.ep;
  w.expert_grad_bytes = w.experts_per_rank * m.expert_params() / p.esp * m.dtype_bytes;
  w.groups = core::build_rank_groups(p);
  w.a2a_level_share = model.alltoall_level_shares(w.groups.ep.front());
  w.inter_level = model.bottleneck_level(w.groups.ep.front());
  return w;
}

std::optional<core::ParallelConfig> with_ep(const PlanInput& in, int ep) {
  const auto& p = in.parallel;
  const core::ParallelSpec spec{p.dp, p.tp, ep, p.esp, p.pp, p.cp, p.cp_layout};
  try {
    return core::resolve_parallel(spec, in.cluster.world_size(), static_cast<int>(in.model.experts),
                                  "ep");
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace moecomm::plan

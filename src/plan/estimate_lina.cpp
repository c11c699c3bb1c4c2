// The Lina row: gradient AllReduce as micro-ops that never share the network with an A2A
// (Lina Sec. 4.1), and experts packed until an FFN micro-op outlasts an A2A micro-op.
#include <algorithm>

#include "plan/estimates.h"
#include "plan/lina_planner.h"

namespace moecomm::plan {

namespace {

std::vector<LinaLinkLevel> span_levels(const EstimateContext& ctx, const GroupSpan& span) {
  std::vector<LinaLinkLevel> levels;
  for (size_t i = 0; i < span.levels.size(); ++i) {
    const int l = span.levels[i];
    levels.push_back(
        {span.counts[i], ctx.topology.device_bandwidth(l), ctx.topology.level(l).latency});
  }
  return levels;
}

LinaBackwardInput backward_input(const EstimateContext& ctx, const MoeWorkload& w, double a2a_s,
                                 double ffn_s, double partition_bytes) {
  LinaBackwardInput in{a2a_s, ffn_s, {}};
  // Dense gradients reduce over the DP group, expert gradients over the EDP group.
  const std::pair<double, const core::RankGroup*> tensors[] = {
      {w.dense_grad_bytes, &w.groups.dp_cp.front()}, {w.expert_grad_bytes, &w.groups.edp.front()}};
  for (const auto& [bytes, group] : tensors) {
    if (group->size() < 2) continue;
    const LinaMicroOps ops = lina_partition(bytes, partition_bytes);
    const double each = ctx.comm.group_time(cost::Collective::kAllReduce, *group, ops.bytes_each);
    in.allreduce_microop_seconds.insert(in.allreduce_microop_seconds.end(), ops.count, each);
  }
  return in;
}

}  // namespace

// Without Lina: the layer's gradients go as one bucket that fair-shares the links with the
// backward A2As (Lina Sec. 2.2); the layer is done when both are.
double backward_with_bucketed_sync(const EstimateContext& ctx, double a2a_s, double ffn_s) {
  LinaBackwardTimes t =
      lina_backward_fair_share(backward_input(ctx, ctx.work, a2a_s, ffn_s, 1e300));
  return t.layer_seconds + t.allreduce_left_seconds;
}

std::optional<StrategyEstimate> estimate_lina(const EstimateContext& ctx, std::string& why) {
  const auto& w = ctx.work;
  const auto& m = ctx.input.model;
  auto span = group_span(ctx.topology, w.groups.ep.front());
  if (!span || span->levels.empty()) {
    why = span ? "the EP group has one rank: no A2A to protect"
               : "the EP group is not a sub-grid of the levels";
    return std::nullopt;
  }
  const auto levels = span_levels(ctx, *span);
  const auto& dp = w.groups.dp_cp.front();
  const int dp_level = ctx.comm.bottleneck_level(dp);
  const double ffn_bwd = 2 * ctx.expert_fwd_s;
  double partition = kLinaDefaultPartitionBytes;
  if (dp_level != core::Topology::kSameDevice) {
    auto line =
        lina_allreduce_line(static_cast<int>(dp.size()), ctx.topology.device_bandwidth(dp_level),
                            ctx.topology.level(dp_level).latency);
    partition = lina_partition_bytes({line, ffn_bwd});
  }
  LinaPackingInput pack;
  pack.experts = static_cast<int>(m.experts);
  pack.ep = ctx.input.parallel.ep;
  pack.levels = levels;
  pack.microop_bytes = std::min(partition, w.a2a_bytes);
  pack.token_bytes = w.token_bytes;
  pack.ffn_flops_per_token = w.expert_flops / w.routed_tokens;
  pack.flops = 1.0 / ctx.gemm.line().beta;
  const LinaPacking packing = lina_pack_experts(pack);
  // Packed, the A2A runs among ep_group ranks, each holding E / ep_group experts whose
  // gradients reduce over the EDP group that packing creates: world / (ep_group esp pp)
  // ranks, not the unpacked one.
  PlanInput packed_input = ctx.input;
  if (auto packed = with_ep(ctx.input, packing.ep_group)) packed_input.parallel = *packed;
  const MoeWorkload packed = derive_workload(packed_input, ctx.comm);
  const double a2a = ctx.comm.alltoall_time(packed.groups.ep.front(), w.a2a_bytes);
  const LinaBackwardTimes bwd =
      lina_backward_a2a_first(backward_input(ctx, packed, a2a, ffn_bwd, partition));
  StrategyEstimate e;
  e.name = "lina";
  e.source = "Lina Sec. 4.1-4.2 (A2A-first micro-ops, expert packing)";
  e.forward_s = ep_forward(ctx, a2a);
  e.backward_s = bwd.layer_seconds + bwd.allreduce_left_seconds + ctx.esp_reduce_s;
  e.memory_bytes = memory_per_device(packed_input, false);  // more experts per device, packed
  e.knobs.name = e.name;
  e.knobs.grad_sync = sched::GradSync::kLina;
  e.a2a_s = a2a;
  e.lina = LinaFigures{partition, packing.experts_per_device, packed_input.parallel.ep,
                       bwd.a2a_blocked_seconds};
  return e;
}

}  // namespace moecomm::plan

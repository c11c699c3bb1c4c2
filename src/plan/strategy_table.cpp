#include "plan/strategy_table.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"
#include "plan/estimates.h"
#include "plan/monta_memory.h"

namespace moecomm::plan {

namespace {

Recompute parse_recompute(const std::string& r) {
  if (r == "none") return Recompute::kNone;
  if (r == "selective") return Recompute::kSelective;
  if (r == "full") return Recompute::kFull;
  throw Error("recompute", "must be none, selective or full, got \"" + r + "\"");
}

}  // namespace

// MoNTA Eq. 1: model states (Table 3) plus activations (Table 4) on one device.
double memory_per_device(const PlanInput& in, bool recompute_experts) {
  const auto& m = in.model;
  const auto& p = in.parallel;
  WeightMemoryInputs wm;
  wm.dense_params = m.layers * m.dense_layer_params() + double(m.vocab_size) * m.hidden;
  wm.moe_params = m.layers * m.experts * m.expert_params();
  wm.p = p.pp;
  wm.t = p.tp;
  wm.e = p.ep;
  wm.dense_dp = p.dp * p.cp;
  wm.expert_dp = p.edp;
  wm.zero_stage = in.zero_stage;
  ActivationInputs act;
  act.b = m.micro_batch;
  act.s = m.seq_len / p.cp;
  act.h = m.hidden;
  act.a = m.heads;
  act.l = m.layers;  // under 1F1B the first stage holds pp micro-batches of l / pp layers
  act.ffn_hidden = m.ffn_hidden;
  act.k = static_cast<int>(m.top_k);
  act.t = p.tp;
  act.sp = p.tp > 1;
  act.recompute = parse_recompute(in.recompute);
  act.recompute_experts = recompute_experts;
  return total_memory(weight_memory(wm), activation_memory(act));
}

namespace {

EstimateContext make_context(const PlanInput& in, const core::Topology& topo, const MoeWorkload& w,
                             const cost::CollectiveModel& comm) {
  const auto& m = in.model;
  const auto& p = in.parallel;
  const core::Device& d = in.cluster.device;
  const cost::GemmModel peak =
      cost::GemmModel::from_peak(d.peak_flops(m.compute()) / units::kTflops, d.compute_efficiency);
  const double beta = peak.line().beta;
  EstimateContext ctx{in, topo, w, comm, cost::GemmModel({in.gemm_startup_s, beta}), {}};
  // FSMoE Eq. 1: one start-up per GEMM; a rank runs ffn_gemms GEMMs for each of its experts.
  ctx.expert_line = {in.gemm_startup_s * m.ffn_gemms() * std::max(1.0, w.experts_per_rank), beta};
  ctx.expert_fwd_s = ctx.expert_line.time(w.expert_flops);
  if (p.esp > 1)
    ctx.esp_reduce_s =
        comm.group_time(cost::Collective::kAllReduce, w.groups.esp.front(), w.a2a_bytes);
  ctx.flat_a2a_s = comm.alltoall_time(w.groups.ep.front(), w.a2a_bytes);
  // Attention forward: the workload's QKV and output projections and scores.
  ctx.pre_expert_fwd_s = ctx.gemm.time_flops(w.attention_flops);
  ctx.base_memory_bytes = memory_per_device(in, false);  // the papers keep expert activations
  ctx.state_bytes_per_expert =
      m.expert_params() / p.esp * model_state_bytes_per_param(in.zero_stage, p.edp);
  return ctx;
}

// One layer's gradient AllReduces on their own: dense over dp x cp, experts over edp.
double grad_sync_s(const MoeWorkload& w, const cost::CollectiveModel& comm) {
  return comm.group_time(cost::Collective::kAllReduce, w.groups.dp_cp.front(), w.dense_grad_bytes) +
         comm.group_time(cost::Collective::kAllReduce, w.groups.edp.front(), w.expert_grad_bytes);
}

void add(ModelEstimates& plan, const std::string& name, std::optional<StrategyEstimate> e,
         const std::string& why) {
  if (e)
    plan.strategies.push_back(std::move(*e));
  else
    plan.skipped.push_back({name, why});
}

}  // namespace

ModelEstimates estimate_strategies(const PlanInput& in) {
  if (!(in.gemm_startup_s >= 0)) throw Error("gemm start-up", "must not be negative");
  const core::Topology topo(in.cluster);
  if (topo.world_size() != in.parallel.world())
    throw Error("parallel configuration", "covers " + std::to_string(in.parallel.world()) +
                                              " ranks, the cluster has " +
                                              std::to_string(topo.world_size()));
  core::check_parallel_fits_model(in.parallel, in.model, "parallel configuration");
  const cost::CollectiveModel comm(topo);
  const MoeWorkload w = derive_workload(in, comm);
  const EstimateContext ctx = make_context(in, topo, w, comm);
  ModelEstimates plan;
  plan.strategies.push_back(estimate_baseline(ctx));
  plan.strategies.push_back(estimate_hierarchical(ctx));
  for (int level = 1; level <= 3; ++level) {
    std::string why;
    add(plan, "monta-o" + std::to_string(level), estimate_monta(ctx, level, why), why);
  }
  std::string why;
  add(plan, "fsmoe", estimate_fsmoe(ctx, why), why);
  add(plan, "hybridep", estimate_hybridep(ctx, 1.0, why), why);
  add(plan, "hybridep-sr", estimate_hybridep(ctx, kHybridEpCompression, why), why);
  add(plan, "lina", estimate_lina(ctx, why), why);
  auto best =
      std::min_element(plan.strategies.begin(), plan.strategies.end(),
                       [](const auto& a, const auto& b) { return a.total_s() < b.total_s(); });
  plan.fastest = best->name;
  plan.workload = {
      {"tokens_per_rank", w.tokens},
      {"a2a_bytes_per_rank", w.a2a_bytes},
      {"a2a_level_share", w.a2a_level_share},
      {"expert_forward_ms", ctx.expert_fwd_s * 1e3},
      {"attention_forward_ms", ctx.pre_expert_fwd_s * 1e3},
      {"grad_sync_ms", grad_sync_s(w, comm) * 1e3},
      {"esp_reduce_ms", ctx.esp_reduce_s * 1e3},
      {"compute_dtype", core::to_string(in.model.compute())},
      {"peak_tflops", in.cluster.device.peak_flops(in.model.compute()) / units::kTflops},
      {"compute_efficiency", in.cluster.device.compute_efficiency}};
  return plan;
}

}  // namespace moecomm::plan

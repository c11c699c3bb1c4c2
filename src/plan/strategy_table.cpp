#include "plan/strategy_table.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"
#include "plan/estimates.h"
#include "plan/monta_memory.h"
#include "sched/pipeline_order.h"

namespace moecomm::plan {

namespace {

Recompute parse_recompute(const std::string& r) {
  if (r == "none") return Recompute::kNone;
  if (r == "selective") return Recompute::kSelective;
  if (r == "full") return Recompute::kFull;
  throw Error("recompute", "must be none, selective or full, got \"" + r + "\"");
}

}  // namespace

namespace {

// Per micro-batch and layer on one device: MoNTA Table 4 with l = 1.
ActivationInputs layer_activations(const PlanInput& in, const core::ModelConfig& m,
                                   const core::ParallelConfig& p, bool recompute_experts) {
  ActivationInputs act;
  act.b = m.micro_batch;
  act.s = m.seq_len / p.cp;
  act.h = m.hidden;
  act.a = m.heads;
  act.kv_heads = m.kv_head_count();
  act.l = 1;
  act.ffn_hidden = m.ffn_hidden;
  act.k = static_cast<int>(m.top_k);
  act.t = p.tp;
  act.sp = p.tp > 1;
  act.recompute = parse_recompute(in.recompute);
  act.recompute_experts = recompute_experts;
  act.shared_ffn_hidden = m.shared_experts * m.shared_ffn();
  return act;
}

}  // namespace

MemoryBreakdown device_memory(const PlanInput& in, const sched::Strategy& knobs) {
  const core::ModelConfig& m = in.whole ? in.whole->model : in.model;
  const core::ParallelConfig& p = in.whole ? in.whole->parallel : in.parallel;
  sched::Strategy order = knobs;
  if (in.whole) {
    order.pp_schedule = in.whole->pipeline.pp_schedule;
    order.virtual_stages = in.whole->pipeline.virtual_stages;
  }
  const int chunks =
      order.pp_schedule == sched::PpSchedule::kInterleaved ? order.virtual_stages : 1;
  const std::vector<int> offsets = sched::layer_offsets(
      sched::split_layers(static_cast<int>(m.layers), p.pp * chunks, "memory: layers"));
  // Parameters on one device per layer: the dense part split by TP, the experts by ESP and EP.
  const double dense_ffn_layer = (m.attention_params() + m.dense_ffn_params()) / p.tp;
  const double moe_dense_layer =
      (m.attention_params() + double(m.hidden) * m.experts + m.shared_expert_params()) / p.tp;
  const double moe_expert_layer = double(m.experts) * m.expert_params() / (double(p.esp) * p.ep);
  const double vocab = double(m.vocab_size) * m.hidden / p.tp;  // embedding, and the LM head
  // Activations of one micro-batch through one layer.
  ActivationInputs act = layer_activations(in, m, p, knobs.recompute_experts);
  const double moe_act = activation_memory(act);
  act.k = 1;
  act.ffn_hidden = m.dense_ffn();
  act.recompute_experts = false;
  act.shared_ffn_hidden = 0;
  const double dense_act = activation_memory(act);
  // The LM head's fp32 logits of the micro-batch at the head (one at a time on the last stage).
  const double logits = 4.0 * double(m.micro_batch) * (m.seq_len / p.cp) * m.vocab_size / p.tp;
  const ModelStateBytes dense_state = model_state_split(knobs.zero, p.dp * p.cp);
  const ModelStateBytes expert_state = model_state_split(knobs.zero, p.edp);
  // The peak comes within the warm-up and the first steady-state round (at most (V + 1) pp
  // chunks in flight, Megatron's warm-up), and repeats after: past 3 pp micro-batches (a
  // multiple of pp, as interleaved needs) more change nothing but under gpipe, which holds all.
  const std::int64_t walked = order.pp_schedule == sched::PpSchedule::kGpipe
                                  ? m.micro_batches
                                  : std::min<std::int64_t>(m.micro_batches, 3 * p.pp);
  MemoryBreakdown best;
  for (int s = 0; s < p.pp; ++s) {
    double dense = (s == 0 ? vocab : 0) + (s == p.pp - 1 ? vocab : 0), experts = 0;
    std::vector<double> chunk_act(chunks, 0.0);
    for (int c = 0; c < chunks; ++c) {
      const int v = sched::virtual_stage(s, c, p.pp);
      for (int layer = offsets[v]; layer < offsets[v + 1]; ++layer) {
        const bool is_dense = layer < m.dense_layers;
        dense += is_dense ? dense_ffn_layer : moe_dense_layer;
        experts += is_dense ? 0 : moe_expert_layer;
        chunk_act[c] += is_dense ? dense_act : moe_act;
      }
    }
    // The activations the stage holds at its peak: a forward keeps its chunk's, the backward
    // of that micro-batch frees them.
    double held = 0, peak = 0;
    for (const sched::PipelineTask& t :
         sched::pipeline_order(order, p.pp, s, static_cast<int>(walked), "memory"))
      peak =
          std::max(peak, held += (t.phase == sched::Phase::kForward ? 1 : -1) * chunk_act[t.chunk]);
    MemoryBreakdown stage;
    stage.stage = s;
    stage.weights = dense * dense_state.weight + experts * expert_state.weight;
    stage.gradients = dense * dense_state.gradient + experts * expert_state.gradient;
    stage.optimizer_states = dense * dense_state.optimizer + experts * expert_state.optimizer;
    stage.activations = peak + (s == p.pp - 1 ? logits : 0);
    if (s == 0 || stage.total() > best.total()) best = stage;
  }
  return best;
}

double memory_per_device(const PlanInput& in, const sched::Strategy& knobs) {
  return device_memory(in, knobs).total();
}

double memory_per_device(const PlanInput& in, bool recompute_experts) {
  sched::Strategy knobs;
  knobs.zero = in.zero;
  knobs.recompute_experts = recompute_experts;
  return memory_per_device(in, knobs);
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
      m.expert_params() / p.esp * model_state_bytes_per_param(in.zero, p.edp);
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

void check_plan_input(const PlanInput& in, const core::Topology& topo) {
  if (!(in.gemm_startup_s >= 0)) throw Error("gemm start-up", "must not be negative");
  if (topo.world_size() != in.parallel.world())
    throw Error("parallel configuration", "covers " + std::to_string(in.parallel.world()) +
                                              " ranks, the cluster has " +
                                              std::to_string(topo.world_size()));
  core::check_parallel_fits_model(in.parallel, in.model, "parallel configuration");
}

}  // namespace

StrategyEstimate estimate_baseline_layer(const PlanInput& in) {
  const core::Topology topo(in.cluster);
  check_plan_input(in, topo);
  const cost::CollectiveModel comm(topo);
  const MoeWorkload w = derive_workload(in, comm);
  return estimate_baseline(make_context(in, topo, w, comm));
}

ModelEstimates estimate_strategies(const PlanInput& in) {
  const core::Topology topo(in.cluster);
  check_plan_input(in, topo);
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

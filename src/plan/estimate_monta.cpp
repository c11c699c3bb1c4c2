// The MoNTA rows of the plan table: Drop + inter-node A2A + intra-node AllGather (O1),
// chunked (O2) and with the reordering copy pipelined (O3), for both A2As of the layer.
#include <cstdio>

#include "plan/estimates.h"
#include "plan/monta_planner.h"

namespace moecomm::plan {

namespace {

// B and r of a level for one device: its share of the level's link and the measured curve.
Channel channel(const EstimateContext& ctx, int level, const char* collective) {
  return {ctx.topology.device_bandwidth(level), cost::EfficiencyCurve(ctx.input.cluster.curve(
                                                    ctx.topology.level(level).name, collective))};
}

// I_minimal: below the smallest A2A size the cluster measured, a chunk's time is start-up
// dominated (MoNTA Algorithm 1 input); 1 MB where nothing was measured.
double minimal_chunk_bytes(const EstimateContext& ctx) {
  auto points = ctx.input.cluster.curve(ctx.topology.level(ctx.work.inter_level).name, "alltoall");
  return points.empty() ? 1e6 : points.front().first;
}

MontaInputs monta_inputs(const EstimateContext& ctx) {
  const auto& m = ctx.input.model;
  const int innermost = ctx.topology.num_levels() - 1;
  MontaInputs in;
  in.b = m.micro_batch;
  in.s = m.seq_len / ctx.input.parallel.cp;
  in.h = m.hidden;
  // Eq. 3 has I = b s h BPE for one token copy; a top-k layout with capacity factor sends
  // k x cf copies, folded into the bytes per element.
  in.bpe = ctx.work.a2a_bytes / (double(in.b) * in.s * in.h);
  in.t = ctx.input.parallel.esp;
  in.e = ctx.input.parallel.ep;
  in.inter = channel(ctx, ctx.work.inter_level, "alltoall");
  in.intra = channel(ctx, innermost, "allgather");
  in.memory = channel(ctx, innermost, "memcpy");
  in.memory.bandwidth_Bps = ctx.input.cluster.device.memory_bandwidth;
  in.i_minimal = minimal_chunk_bytes(ctx);
  return in;
}

// MoNTA assumes the ESP (= TP) group fills a node and the EP group has one rank per node.
bool applies(const EstimateContext& ctx, std::string& why) {
  const auto& p = ctx.input.parallel;
  if (p.esp < 2) {
    why = "needs expert sharding (esp > 1): MoNTA drops the TP-replicated tokens";
    return false;
  }
  if (ctx.work.inter_level == core::Topology::kSameDevice) {
    why = "the EP group has one rank: no A2A";
    return false;
  }
  if (p.tp != p.esp) {
    why = "needs tp = esp: MoNTA drops the tokens the TP group holds in copies";
    return false;
  }
  if (ctx.comm.bottleneck_level(ctx.work.groups.esp.front()) <= ctx.work.inter_level) {
    why = "the ESP group crosses the EP group's link: MoNTA needs it inside a node";
    return false;
  }
  auto span = group_span(ctx.topology, ctx.work.groups.ep.front());
  if (!span || span->levels.size() != 1) {
    why = "MoNTA's A2A model needs one EP rank per node";
    return false;
  }
  return true;
}

// MoNTA Fig. 10 outputs for one micro-batch through every layer: latency, throughput and
// MFU, with everything but the row's four A2As (attention and the rest of the MoE layer,
// forward and backward) as the "other" time.
void add_performance(const EstimateContext& ctx, double a2a, StrategyEstimate& e) {
  const auto& m = ctx.input.model;
  const auto& p = ctx.input.parallel;
  LayerFlopsInputs f{m.micro_batch, m.seq_len, m.hidden,
                     m.ffn_hidden,  m.experts, static_cast<int>(m.top_k),
                     m.ffn_gemms()};
  PerformanceInputs in;
  in.layers = m.layers / p.pp;
  in.layer_other_s = e.total_s() - 4 * a2a + 3 * ctx.pre_expert_fwd_s;
  in.a2a_s = a2a;
  in.tokens = double(m.micro_batch) * m.seq_len * p.dp;
  in.model_flops = double(in.layers) * moe_layer_training_flops(f) * p.dp;
  in.devices = ctx.topology.world_size() / p.pp;
  in.peak_flops = ctx.input.cluster.device.peak_flops(ctx.input.model.compute());
  const Performance perf = estimate_performance(in);
  e.monta->latency_s = perf.latency_s;
  e.monta->tokens_per_s = perf.tokens_per_s;
  e.monta->mfu = perf.mfu;
}

// O1: Drop + A2A + AllGather; O2 adds N chunks whose experts wait for every chunk (Fig. 15);
// O3 moves each chunk's reordering copy onto the copy stream (Algorithm 2).
sched::Strategy monta_knobs(const std::string& name, int level, std::int64_t chunks) {
  sched::Strategy s;
  s.name = name;
  s.tp_dispatch = sched::TpDispatch::kDropAllGather;
  s.chunks_fwd = s.chunks_bwd = static_cast<int>(chunks);  // N <= kMontaMaxChunks
  s.pipeline_experts = level == 1;
  s.copy_pipelining = level == 3;
  return s;
}

}  // namespace

std::optional<StrategyEstimate> estimate_monta(const EstimateContext& ctx, int level,
                                               std::string& why) {
  if (!applies(ctx, why)) return std::nullopt;
  const MontaInputs in = monta_inputs(ctx);
  const MontaCosts costs = monta_costs(in);
  double a2a = costs.o1_s;
  std::int64_t chunks = 1;
  if (level == 2) {
    a2a = costs.o2.time_s;
    chunks = costs.o2.n;
  } else if (level == 3) {
    a2a = costs.o3.time_s;
    chunks = costs.o3.n;
  }
  if (chunks == 0) {  // Algorithms 1-2 found no N whose chunks reach I_minimal
    char bytes[32];
    std::snprintf(bytes, sizeof bytes, "%.4g", in.i_minimal);
    why = std::string("even one chunk is below I_minimal (") + bytes +
          " bytes): chunking does not pay";
    return std::nullopt;
  }
  StrategyEstimate e;
  e.name = "monta-o" + std::to_string(level);
  e.source = "MoNTA Eq. 8-11, Algorithms 1-2";
  // The combine mirrors the dispatch, so both A2As of the layer take the row's time; the
  // ReduceScatter of the expert shards replaces the ESP AllReduce the baseline needs.
  e.forward_s = kA2APerForward * a2a + ctx.expert_fwd_s;
  static_assert(kA2APerBackward == 2, "backward_with_bucketed_sync models two A2As");
  e.backward_s = backward_with_bucketed_sync(ctx, a2a, 2 * ctx.expert_fwd_s);
  e.memory_bytes = ctx.base_memory_bytes;
  e.knobs = monta_knobs(e.name, level, chunks);
  e.a2a_s = a2a;
  e.monta.emplace();
  e.monta->baseline_a2a_s = costs.baseline_s;
  e.monta->i_minimal_bytes = in.i_minimal;
  add_performance(ctx, a2a, e);
  if (level == 2 || level == 3)
    e.monta->choice = std::string(variant_name(select_variant(costs).variant));
  return e;
}

}  // namespace moecomm::plan

#include "sched/layer_builder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "sched/build_block.h"
#include "sched/build_context.h"
#include "sched/build_dense.h"
#include "sched/build_dispatch.h"
#include "sched/build_grad_sync.h"
#include "sched/build_hybridep.h"
#include "sched/build_optimizer.h"
#include "sched/pipeline_order.h"

namespace moecomm::sched {
namespace {

// A step must fit in memory: the knobs are bounded one by one, but layers x chunks x
// partitions x ranks is not. An op with its flows takes about 500 bytes in the simulator (20M
// ops: 10 GB); every A2A keeps its n x n matrix.
inline constexpr double kMaxStepOps = 2e7;
inline constexpr double kMaxPairBytes = 4e9;

void check_size(const LayerSetup& s) {
  const auto& p = s.parallel;
  const Strategy& st = s.strategy;
  const double ops = step_ops_bound(s);
  if (ops > kMaxStepOps)
    throw Error("setup", "the step would have up to " + std::to_string(int64_t(ops)) +
                             " ops (more than " + std::to_string(int64_t(kMaxStepOps)) +
                             "): lower the layers, chunks or grad_partitions");
  const double world = p.world(), layers = s.layers, micro_batches = s.micro_batches;
  const double chunks = st.chunks_fwd + st.chunks_bwd;
  // Each layer's A2As run on the EP groups of its own stage: world / (ep pp) of them.
  const double ep = p.ep, a2as = layers * micro_batches * 2.0 * chunks * (world / (ep * p.pp));
  const double pair_bytes = a2as * ep * ep * sizeof(double);
  if (pair_bytes > kMaxPairBytes)
    throw Error("setup", "the step's A2A pair matrices would take " +
                             std::to_string(int64_t(pair_bytes / 1e9)) +
                             " GB: lower the layers or chunks, or simulate a smaller EP size");
}

void check_setup(const LayerSetup& s) {
  const auto& p = s.parallel;
  if (p.world() != p.esp * p.ep * p.edp * p.pp)
    throw Error("parallel", "esp x ep x edp x pp = " + std::to_string(p.esp * p.ep * p.edp * p.pp) +
                                " does not fold the world tp x cp x dp x pp = " +
                                std::to_string(p.world()) + " (resolve the sizes first)");
  if (!s.cluster.levels.empty() && s.cluster.world_size() != p.world())
    throw Error("cluster", "has " + std::to_string(s.cluster.world_size()) +
                               " devices, the parallel sizes need " + std::to_string(p.world()));
  if (s.layers < 1 || s.layers > core::kMaxLayers)
    throw Error("layers", "must be in [1, " + std::to_string(core::kMaxLayers) + "], got " +
                              std::to_string(s.layers));
  validate(s.strategy, "strategy");
  if (s.micro_batches < 1 || s.micro_batches > core::kMaxMicroBatch)
    throw Error("micro_batches", "must be in [1, " + std::to_string(core::kMaxMicroBatch) +
                                     "], got " + std::to_string(s.micro_batches));
  if (s.layers < p.pp * s.strategy.virtual_stages)
    throw Error("layers", std::to_string(s.layers) +
                              " layers cannot fill pp = " + std::to_string(p.pp) + " stages x " +
                              std::to_string(s.strategy.virtual_stages) +
                              " virtual stages (every one needs a layer)");
  if (s.lm_head && s.model.vocab_size < 1) throw Error("lm_head", "needs the model's vocab_size");
  if (!s.dense_grad_bytes.empty()) {
    if (static_cast<int>(s.dense_grad_bytes.size()) != s.layers)
      throw Error("dense_grad_bytes", "has " + std::to_string(s.dense_grad_bytes.size()) +
                                          " entries, the step " + std::to_string(s.layers) +
                                          " layers");
    for (double b : s.dense_grad_bytes)
      if (!(b >= 0) || !std::isfinite(b))
        throw Error("dense_grad_bytes", "must be finite and >= 0, got " + std::to_string(b));
  }
  check_size(s);
}

// The whole step's pipeline: stages, model chunks per stage, micro-batches, and the blocks of
// each virtual stage.
struct Pipeline {
  int stages = 1;
  int chunks = 1;  // virtual stages per stage
  int virtual_stages = 1;
  int micro_batches = 1;
  std::vector<int> offsets;  // layer_offsets of the virtual stages
};

Pipeline make_pipeline(const LayerSetup& s) {
  Pipeline pl;
  pl.stages = s.parallel.pp;
  pl.chunks = s.strategy.virtual_stages;
  pl.virtual_stages = pl.stages * pl.chunks;
  pl.micro_batches = s.micro_batches;
  pl.offsets = layer_offsets(split_layers(s.layers, pl.virtual_stages, "layers"));
  return pl;
}

// A second lane of streams (overlap_microbatches): a backward runs beside a forward.
inline constexpr int kLaneStreams = static_cast<int>(kStreamNames.size());

void name_streams(Schedule& schedule, bool two_lanes) {
  for (int lane = 0; lane < (two_lanes ? 2 : 1); ++lane)
    for (int s = 0; s < kLaneStreams; ++s) {
      const int stream = lane * kLaneStreams + s;
      std::string name(kStreamNames[size_t(s)]);
      schedule.name_stream(stream, lane == 0 ? name : name + " (2nd micro-batch)");
      if (s == kPlacementStream) schedule.mark_host_stream(stream);  // NetMoE's solve: CPU
    }
}

void begin_task(BuildContext& ctx, const Pipeline& pl, const PipelineTask& task, int v,
                const std::vector<std::vector<OpId>>& after) {
  ctx.phase = task.phase;
  ctx.micro_batch = pl.micro_batches > 1 ? task.micro_batch : -1;
  ctx.first_micro_batch = task.micro_batch == 0;
  ctx.last_micro_batch = task.micro_batch == pl.micro_batches - 1;
  ctx.layer_begin = pl.offsets[size_t(v)];
  ctx.layer_end = pl.offsets[size_t(v) + 1];
  for (int r = 0; r < ctx.world(); ++r) {
    if (!ctx.active(r)) continue;
    ctx.ready[r].clear();
    for (const auto& ends : after)
      if (ends[size_t(r)] != kNone) ctx.ready[r].push_back(ends[size_t(r)]);
  }
}

// Returns the stage send of the task's output per rank.
std::vector<OpId> forward_task(BuildContext& ctx, const Pipeline& pl, int v) {
  const bool last = v == pl.virtual_stages - 1;
  build_stage_receive(ctx, v, pl.virtual_stages);
  if (last) ctx.targets_moved = build_targets_gather(ctx);
  if (ctx.first_micro_batch) ctx.step_start = ctx.ready;  // HybridEP's send queue starts here
  for (int l = ctx.layer_begin; l < ctx.layer_end; ++l) build_block_forward(ctx, l);
  if (last) build_head(ctx);
  return build_stage_send(ctx, v, pl.virtual_stages);
}

// The last micro-batch's backward synchronizes the gradients, block by block as their
// backward makes them (gradient accumulation: once per step).
void backward_task(BuildContext& ctx, const Pipeline& pl, int v) {
  build_stage_receive(ctx, v, pl.virtual_stages);
  if (v == pl.virtual_stages - 1) build_head(ctx);
  for (int l = ctx.layer_end - 1; l >= ctx.layer_begin; --l) {
    build_block_backward(ctx, l);
    if (ctx.last_micro_batch) grad_sync_after_layer(ctx, l);
  }
  if (ctx.last_micro_batch) grad_sync_finish(ctx);
  build_stage_send(ctx, v, pl.virtual_stages);
}

// Stage `stage`'s tasks in its pipeline order. With overlap_microbatches a backward runs on
// the second lane beside the forward next to it, and each task waits for the tasks two and
// three before it: at most one forward and one backward are in flight, as 1F1B keeps them.
void build_stage(BuildContext& ctx, const Pipeline& pl, int stage) {
  for (int r = 0; r < ctx.world(); ++r) ctx.in_stage[size_t(r)] = 0;
  for (const auto& pp : ctx.groups.pp) ctx.in_stage[size_t(pp[size_t(stage)])] = 1;
  const bool overlap = ctx.strategy.overlap_microbatches;
  const std::vector<PipelineTask> order =
      pipeline_order(ctx.strategy, pl.stages, stage, pl.micro_batches, "strategy: pp_schedule");
  // Per (micro-batch, chunk): the forward's last ops and its stage send, which its backward
  // starts after (the send hands on the output the forward's last block finished; the
  // backward's receive follows it on the peer stage anyway, but a rank's runtime must see it).
  std::vector<std::vector<OpId>> forward_end(size_t(pl.micro_batches) * pl.chunks);
  std::vector<std::vector<OpId>> forward_send(forward_end.size());
  std::vector<std::vector<OpId>> task_end;
  for (size_t i = 0; i < order.size(); ++i) {
    const PipelineTask& task = order[i];
    const int v = virtual_stage(stage, task.chunk, pl.stages);
    const size_t key = size_t(task.micro_batch) * pl.chunks + task.chunk;
    std::vector<std::vector<OpId>> after;
    if (task.phase == Phase::kBackward) {
      after.push_back(forward_end[key]);
      after.push_back(forward_send[key]);
    }
    if (overlap)
      for (size_t back = 2; back <= 3 && back <= i; ++back) after.push_back(task_end[i - back]);
    ctx.schedule.set_stream_offset(overlap && task.phase == Phase::kBackward ? kLaneStreams : 0);
    begin_task(ctx, pl, task, v, after);
    if (task.phase == Phase::kForward) {
      forward_send[key] = forward_task(ctx, pl, v);
      forward_end[key] = last_of(ctx.ready);
    } else {
      backward_task(ctx, pl, v);
    }
    task_end.push_back(last_of(ctx.ready));
  }
  ctx.schedule.set_stream_offset(0);
}

}  // namespace

double step_ops_bound(const LayerSetup& s) {
  const Strategy& st = s.strategy;
  // Per rank and layer, at most: forward 4 dense ops (CP AllGather, attention, TP AllReduce,
  // gate), 1 HybridEP prefetch and 3 NetMoE ops (two AllGathers and the solve); backward 4
  // dense ops and 2 HybridEP gradient ops; per chunk of either phase 8 MoE ops (dispatch A2A,
  // ESP AllGather and its copy, experts, ESP ReduceScatter, combine A2A, TP AllGather and its
  // copy); 2 gradient AllReduces per partition; per phase 2 shared-expert ops (the compute
  // and its TP AllReduce). A dense block (dense_layers) has fewer: 5 per phase.
  const double shared = s.model.shared_experts > 0 ? 4.0 : 0.0;
  const double per_layer =
      14.0 + shared + 8.0 * (st.chunks_fwd + st.chunks_bwd) + 2.0 * st.grad_partitions;
  // Per rank and micro-batch of a model chunk: a stage receive and send per phase, the head
  // per phase, NetMoE's targets.
  const double per_task = 7.0;
  const double pp = std::max(1, s.parallel.pp), chunks = std::max(1, st.virtual_stages);
  // A stage's world / pp ranks run its blocks; the stages' blocks add up to the layers.
  const double world = s.parallel.world(), micro_batches = std::max(1, s.micro_batches);
  return micro_batches * (world / pp * double(s.layers) * per_layer + world * chunks * per_task) +
         optimizer_ops_bound(s);
}

Schedule build_training_step(const LayerSetup& setup) {
  check_setup(setup);
  const core::RankGroups groups = core::build_rank_groups(setup.parallel);
  const Pipeline pipeline = make_pipeline(setup);
  BuildContext ctx(setup, groups);
  ctx.schedule.set_compute_dtype(setup.model.compute());
  name_streams(ctx.schedule, setup.strategy.overlap_microbatches);
  ctx.hybrid_orders = hybrid_orders(setup, groups);
  ctx.path = make_token_path(setup, groups, ctx.work, ctx.hybrid_orders);
  const std::vector<OpId> none(ctx.world(), kNone);
  ctx.grads.assign(setup.layers, LayerGrads{none, none, none});
  ctx.layer_prefetch.assign(setup.layers, none);
  for (int stage = 0; stage < pipeline.stages; ++stage) build_stage(ctx, pipeline, stage);
  build_optimizer(ctx);
  return std::move(ctx.schedule);
}

}  // namespace moecomm::sched

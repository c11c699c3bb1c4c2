#include "sched/layer_builder.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "sched/build_block.h"
#include "sched/build_context.h"
#include "sched/build_dense.h"
#include "sched/build_dispatch.h"
#include "sched/build_grad_sync.h"
#include "sched/build_hybridep.h"

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
  const double world = p.world(), layers = s.layers;
  const double chunks = st.chunks_fwd + st.chunks_bwd;
  const double ep = p.ep, a2as = layers * 2.0 * chunks * (world / ep);
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
  // Per rank and step: a stage receive and send per phase, the head per phase, NetMoE's targets.
  const double per_step = 7.0;
  return double(s.parallel.world()) * (double(s.layers) * per_layer + per_step);
}

Schedule build_training_step(const LayerSetup& setup) {
  check_setup(setup);
  const core::RankGroups groups = core::build_rank_groups(setup.parallel);
  BuildContext ctx(setup, groups);
  ctx.schedule.set_compute_dtype(setup.model.compute());
  for (size_t s = 0; s < kStreamNames.size(); ++s)
    ctx.schedule.name_stream(static_cast<int>(s), std::string(kStreamNames[s]));
  ctx.hybrid_orders = hybrid_orders(setup, groups);
  ctx.path = make_token_path(setup, groups, ctx.work, ctx.hybrid_orders);
  const std::vector<OpId> none(ctx.world(), kNone);
  ctx.grads.assign(setup.layers, LayerGrads{none, none, none});

  ctx.phase = Phase::kForward;
  build_stage_receive(ctx);
  ctx.targets_moved = build_targets_gather(ctx);
  for (int l = 0; l < setup.layers; ++l) {
    if (l == 0) ctx.step_start = ctx.ready;
    build_block_forward(ctx, l);
  }
  build_head(ctx);
  build_stage_send(ctx);

  ctx.phase = Phase::kBackward;
  build_stage_receive(ctx);
  build_head(ctx);
  for (int l = setup.layers - 1; l >= 0; --l) {
    build_block_backward(ctx, l);
    grad_sync_after_layer(ctx, l);
  }
  build_stage_send(ctx);
  grad_sync_finish(ctx);
  return std::move(ctx.schedule);
}

}  // namespace moecomm::sched

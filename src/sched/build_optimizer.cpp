#include "sched/build_optimizer.h"

#include <algorithm>
#include <string>

#include "sched/pipeline_order.h"

namespace moecomm::sched {
namespace {

// fp32: Adam's states as the papers keep them in mixed precision (ZeRO Sec. 3.1).
constexpr double kStateBytes = 4;

// Per rank, the size of its group in `groups` (1 where it is in none).
std::vector<double> group_sizes(const std::vector<core::RankGroup>& groups, int world) {
  std::vector<double> out(static_cast<size_t>(world), 1);
  for (const auto& g : groups)
    for (int r : g) out[static_cast<size_t>(r)] = double(g.size());
  return out;
}

// Per layer, per rank: whether the rank holds the block. Virtual stage v = chunk x pp +
// stage holds the blocks [off[v], off[v + 1]) of split_layers (pipeline_order.h); a rank's
// stage is its place in its pp group.
std::vector<std::vector<char>> holders(const BuildContext& ctx) {
  const int pp = ctx.setup.parallel.pp;
  const std::vector<int> off =
      layer_offsets(split_layers(ctx.setup.layers, pp * ctx.strategy.virtual_stages, "layers"));
  std::vector<int> stage(static_cast<size_t>(ctx.world()), 0);
  for (const auto& g : ctx.groups.pp)
    for (size_t i = 0; i < g.size(); ++i) stage[static_cast<size_t>(g[i])] = int(i);
  std::vector<std::vector<char>> out(static_cast<size_t>(ctx.setup.layers));
  for (size_t v = 0; v + 1 < off.size(); ++v)
    for (int l = off[v]; l < off[v + 1]; ++l) {
      auto& held = out[static_cast<size_t>(l)];
      held.assign(stage.size(), 0);
      for (size_t r = 0; r < stage.size(); ++r) held[r] = stage[r] == int(v) % pp;
    }
  return out;
}

// The groups of `groups` whose ranks hold the block (a data-parallel group lies in one
// pipeline stage: all its members or none).
std::vector<core::RankGroup> holding(const std::vector<core::RankGroup>& groups,
                                     const std::vector<char>& held) {
  std::vector<core::RankGroup> out;
  for (const auto& g : groups)
    if (!g.empty() && held[static_cast<size_t>(g.front())]) out.push_back(g);
  return out;
}

// The ops of `out` that are not in `in`, per rank: what a group_step added (nothing for ranks
// in groups of one, where it passes `in` through).
Frontier added(const Frontier& out, const Frontier& in) {
  Frontier f(out.size());
  for (size_t r = 0; r < out.size(); ++r)
    if (out[r] != in[r]) f[r] = out[r];
  return f;
}

// Where the AllGather of the block `label` names may start on rank r: with the previous block
// of the same phase and micro-batch (the frontier its first op started from, which is the op
// added right after that block's AllGathers), if the rank's latest ZeRO-3 AllGather was that
// block's; else with this block (ctx.ready). The scan stops at the rank's latest AllGather.
std::vector<OpId> prefetch_point(const BuildContext& ctx, int r, const Label& label) {
  const int previous = label.layer + (label.phase == Phase::kBackward ? 1 : -1);
  const std::vector<OpId>& ops = ctx.schedule.ops_of(r);
  for (size_t i = ops.size(); i-- > 0;) {
    const Label& l = ctx.schedule.label(ops[i]);
    if (l.role != OpRole::kZeroParamAllGather) continue;
    if (l.layer == previous && l.phase == label.phase && l.micro_batch == label.micro_batch &&
        i + 1 < ops.size())
      return ctx.schedule.deps(ops[i + 1]);
    break;
  }
  return ctx.ready[static_cast<size_t>(r)];
}

// Per stream of rank r, its last op, but the compute stream's (an op added there follows it).
std::vector<OpId> stream_ends(const Schedule& s, int r) {
  std::vector<OpId> last(static_cast<size_t>(s.num_streams(r)), kNone);
  for (OpId id : s.ops_of(r)) last[static_cast<size_t>(s.op(id).stream)] = id;
  std::vector<OpId> out;
  for (size_t stream = 0; stream < last.size(); ++stream)
    if (last[stream] != kNone && int(stream) != kComputeStream) out.push_back(last[stream]);
  return out;
}

std::string zero_knob(const Strategy& s) {
  return s.zero > 0 ? "zero" : "";
}

}  // namespace

double adam_bytes_per_element(int64_t dtype_bytes) {
  const double g = double(dtype_bytes);
  const double states = 3 * std::max(kStateBytes, g);  // master weight, m, v
  return g + 2 * states + (g < kStateBytes ? g : 0);
}

std::vector<OptimizerShard> optimizer_shards(const BuildContext& ctx) {
  const int world = ctx.world();
  const double dtype = double(ctx.setup.model.dtype_bytes);
  std::vector<OptimizerShard> out(static_cast<size_t>(world));
  const std::vector<std::vector<char>> held = holders(ctx);
  for (size_t l = 0; l < held.size(); ++l)
    for (size_t r = 0; r < out.size(); ++r) {
      if (!held[l][r]) continue;
      out[r].dense += ctx.dense_grad_bytes(int(l)) / dtype;
      out[r].expert += ctx.work.expert_grad_bytes / dtype;
    }
  if (ctx.strategy.zero >= 1) {
    const std::vector<double> dense = group_sizes(ctx.groups.dp_cp, world);
    const std::vector<double> expert = group_sizes(ctx.groups.edp, world);
    for (size_t r = 0; r < out.size(); ++r) {
      out[r].dense_group = dense[r];
      out[r].expert_group = expert[r];
    }
  }
  return out;
}

void zero3_gather_block(BuildContext& ctx, int layer) {
  if (ctx.strategy.zero < 3) return;
  const Label label = ctx.label(OpRole::kZeroParamAllGather, "zero");
  const double expert_bytes = ctx.work.expert_grad_bytes;
  const std::vector<double> dense_group = group_sizes(ctx.groups.dp_cp, ctx.world());
  const std::vector<double> expert_group = group_sizes(ctx.groups.edp, ctx.world());
  Frontier issue(static_cast<size_t>(ctx.world()));
  for (int r = 0; r < ctx.world(); ++r) {
    const size_t i = static_cast<size_t>(r);
    const bool gathers =
        ctx.active(r) && (dense_group[i] > 1 || (expert_bytes > 0 && expert_group[i] > 1));
    issue[i] = gathers ? prefetch_point(ctx, r, label) : ctx.ready[i];
  }
  std::vector<Frontier> gathered = {
      added(group_step(ctx, ctx.groups.dp_cp, OpKind::kAllGather, ctx.dense_grad_bytes(layer),
                       kCopyStream, label, issue),
            issue)};
  if (expert_bytes > 0)
    gathered.push_back(added(group_step(ctx, ctx.groups.edp, OpKind::kAllGather, expert_bytes,
                                        kCopyStream, label, issue),
                             issue));
  gathered.insert(gathered.begin(), ctx.ready);
  ctx.ready = merge(gathered);
}

void build_optimizer(BuildContext& ctx) {
  if (!ctx.setup.optimizer) return;
  ctx.in_stage.assign(static_cast<size_t>(ctx.world()), 1);  // every stage's ranks step
  const std::vector<OptimizerShard> shards = optimizer_shards(ctx);
  const double bytes = adam_bytes_per_element(ctx.setup.model.dtype_bytes);
  const Label adam{OpRole::kOptimizer, -1, Phase::kNone, -1, zero_knob(ctx.strategy)};
  std::vector<OpId> stepped(static_cast<size_t>(ctx.world()), kNone);
  for (int r = 0; r < ctx.world(); ++r) {
    const double n = shards[static_cast<size_t>(r)].updated();
    stepped[static_cast<size_t>(r)] = ctx.schedule.add_compute(
        r, kComputeStream, kAdamFlopsPerElement * n, bytes * n, adam, stream_ends(ctx.schedule, r));
  }
  if (ctx.strategy.zero != 1 && ctx.strategy.zero != 2) return;
  // ZeRO Sec. 7.2.1: every rank updated its 1/d of each bucket; the AllGather (buffer S: the
  // whole bucket at dtype_bytes) returns the full updated parameters to every member, bucket
  // by bucket in the next forward's order.
  const Frontier after = single(stepped);
  const std::vector<std::vector<char>> held = holders(ctx);
  for (size_t l = 0; l < held.size(); ++l) {
    const Label label{OpRole::kZeroParamAllGather, int(l), Phase::kNone, -1, "zero"};
    group_step(ctx, holding(ctx.groups.dp_cp, held[l]), OpKind::kAllGather,
               ctx.dense_grad_bytes(int(l)), kGradStream, label, after);
    if (ctx.work.expert_grad_bytes > 0)
      group_step(ctx, holding(ctx.groups.edp, held[l]), OpKind::kAllGather,
                 ctx.work.expert_grad_bytes, kGradStream, label, after);
  }
}

double optimizer_ops_bound(const LayerSetup& s) {
  const int zero = s.strategy.zero;
  const double micro_batches = std::max(1, s.micro_batches);
  const double gathers = zero == 3 ? 4.0 * micro_batches : zero >= 1 ? 2.0 : 0.0;
  return double(s.parallel.world()) * (double(s.layers) * gathers + 1.0);
}

}  // namespace moecomm::sched

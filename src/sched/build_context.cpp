#include "sched/build_context.h"

#include <algorithm>

#include "sched/wire_dtype.h"

namespace moecomm::sched {

BuildContext::BuildContext(const LayerSetup& s, const core::RankGroups& g)
    : setup(s),
      strategy(s.strategy),
      groups(g),
      work(layer_workload(s.model, s.parallel)),
      schedule(s.parallel.world()),
      ready(s.parallel.world()),
      prefetch(s.parallel.world(), kNone),
      targets_moved(s.parallel.world(), kNone),
      in_stage(s.parallel.world(), 1) {}

int BuildContext::chunks() const {
  return phase == Phase::kBackward ? strategy.chunks_bwd : strategy.chunks_fwd;
}

double BuildContext::dense_grad_bytes(int l) const {
  return setup.dense_grad_bytes.empty() ? work.block_dense_grad_bytes(l)
                                        : setup.dense_grad_bytes[static_cast<size_t>(l)];
}

Label BuildContext::label(OpRole role, const std::string& knob, int chunk) const {
  return Label{role, layer, phase, chunk, knob, micro_batch};
}

Frontier compute_step(BuildContext& ctx, const std::vector<double>& flops, const Label& label,
                      const Frontier& in) {
  Frontier out = in;
  for (int r = 0; r < ctx.world(); ++r)
    if (ctx.active(r))
      out[r] = {ctx.schedule.add_compute(r, kComputeStream, flops[r], 0, label, in[r])};
  return out;
}

Frontier compute_step(BuildContext& ctx, double flops, const Label& label, const Frontier& in) {
  return compute_step(ctx, std::vector<double>(ctx.world(), flops), label, in);
}

Frontier copy_step(BuildContext& ctx, double bytes, int stream, const Label& label,
                   const Frontier& in) {
  Frontier out = in;
  for (int r = 0; r < ctx.world(); ++r)
    if (ctx.active(r)) out[r] = {ctx.schedule.add_copy(r, stream, bytes, label, in[r])};
  return out;
}

Frontier group_step(BuildContext& ctx, const std::vector<core::RankGroup>& groups, OpKind kind,
                    double bytes, int stream, const Label& label, const Frontier& in,
                    int priority) {
  return group_step(ctx, groups, kind, std::vector<double>(groups.size(), bytes), stream, label, in,
                    priority);
}

WireCodec plain_codec(const BuildContext& ctx) {
  WireCodec codec;
  codec.dtype = core::default_compute_dtype(ctx.setup.model.dtype_bytes);
  return codec;
}

namespace {
std::optional<core::Dtype> token_dtype(const BuildContext& ctx, TokenDirection direction) {
  const auto& d = ctx.strategy.a2a_dtype;
  if (!d) return std::nullopt;
  return direction == TokenDirection::kDispatch ? d->dispatch : d->combine;
}
}  // namespace

WireCodec token_codec(const BuildContext& ctx, TokenDirection direction) {
  WireCodec codec = plain_codec(ctx);
  if (const auto dtype = token_dtype(ctx, direction)) codec.dtype = *dtype;
  return codec;
}

double token_wire_scale(const BuildContext& ctx, TokenDirection direction) {
  const auto dtype = token_dtype(ctx, direction);
  if (!dtype || ctx.work.token_bytes <= 0) return 1;
  return wire_row_bytes(ctx.setup.model.hidden, *dtype) / ctx.work.token_bytes;
}

Frontier group_step(BuildContext& ctx, const std::vector<core::RankGroup>& groups, OpKind kind,
                    const std::vector<double>& bytes, int stream, const Label& label,
                    const Frontier& in, int priority, const std::optional<WireCodec>& codec) {
  Frontier out = in;
  for (size_t k = 0; k < groups.size(); ++k) {
    const auto& g = groups[k];
    if (g.size() < 2 || !ctx.active(g)) continue;
    CollectiveSpec spec{.kind = kind,
                        .group = g,
                        .bytes = bytes.at(k),
                        .pair_bytes = {},
                        .algorithm = Algorithm::kDefault,
                        .root = kNone,
                        .label = label,
                        .priority = priority,
                        .codec = codec.value_or(plain_codec(ctx))};
    std::vector<std::vector<OpId>> deps;
    for (int r : g) deps.push_back(in[r]);
    const auto issued = ctx.schedule.add_collective(std::move(spec), stream, deps);
    for (size_t i = 0; i < g.size(); ++i) out[g[i]] = {issued.ops[i]};
  }
  return out;
}

Frontier a2a_step(BuildContext& ctx, const std::vector<std::vector<double>>& pairs,
                  const Label& label, const Frontier& in, int priority, const WireCodec& codec,
                  const std::vector<std::vector<double>>& node_bytes, A2ADirection direction) {
  Frontier out = in;
  for (size_t k = 0; k < ctx.groups.ep.size(); ++k) {
    const auto& g = ctx.groups.ep[k];
    if (g.size() < 2 || !ctx.active(g)) continue;
    CollectiveSpec spec{.kind = OpKind::kAllToAll,
                        .group = g,
                        .bytes = 0,
                        .pair_bytes = pairs[k],
                        .node_bytes = node_bytes.empty() ? std::vector<double>{} : node_bytes[k],
                        .direction = direction,
                        .algorithm = ctx.strategy.a2a,
                        .root = kNone,
                        .label = label,
                        .priority = priority,
                        .codec = codec};
    std::vector<std::vector<OpId>> deps;
    for (int r : g) deps.push_back(in[r]);
    const auto issued = ctx.schedule.add_collective(std::move(spec), kTokenStream, deps);
    for (size_t i = 0; i < g.size(); ++i) out[g[i]] = {issued.ops[i]};
  }
  return out;
}

Frontier single(const std::vector<OpId>& per_rank) {
  Frontier out(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r)
    if (per_rank[r] != kNone) out[r] = {per_rank[r]};
  return out;
}

Frontier merge(const std::vector<Frontier>& parts) {
  Frontier out(parts.empty() ? 0 : parts.front().size());
  for (const auto& p : parts)
    for (size_t r = 0; r < p.size(); ++r) {
      for (OpId id : p[r])
        if (std::find(out[r].begin(), out[r].end(), id) == out[r].end()) out[r].push_back(id);
    }
  return out;
}

std::vector<OpId> last_of(const Frontier& f) {
  std::vector<OpId> out(f.size(), kNone);
  for (size_t r = 0; r < f.size(); ++r)
    if (!f[r].empty()) out[r] = *std::max_element(f[r].begin(), f[r].end());
  return out;
}

}  // namespace moecomm::sched

#include "sched/build_hybridep.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"
#include "sched/hybrid_routing.h"

namespace moecomm::sched {

namespace {

std::vector<int> identity(int n) {
  std::vector<int> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

// Each member's coordinate per spanned level, renumbered 0..count-1 within the group.
std::vector<std::vector<int>> group_coordinates(const core::Topology& topology,
                                                const core::RankGroup& ep,
                                                const core::GroupSpan& span) {
  std::vector<std::vector<int>> coords(ep.size());
  for (int level : span.levels) {
    std::set<int> seen;
    for (int r : ep) seen.insert(topology.location(r)[level]);
    const std::vector<int> sorted(seen.begin(), seen.end());
    for (size_t i = 0; i < ep.size(); ++i) {
      const int x = topology.location(ep[i])[level];
      coords[i].push_back(int(std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin()));
    }
  }
  return coords;
}

}  // namespace

std::vector<int> hybrid_member_order(const core::Topology& topology, const core::RankGroup& ep,
                                     const std::vector<int>& sizes, const std::string& where) {
  if (sizes.empty()) return identity(static_cast<int>(ep.size()));
  const auto span = core::group_span(topology, ep);
  if (!span || span->counts.size() != sizes.size())
    throw Error(where, "needs one size per level the EP group spans (" +
                           std::to_string(span ? span->counts.size() : 0) + " levels), got " +
                           std::to_string(sizes.size()));
  for (size_t l = 0; l < sizes.size(); ++l)
    if (span->counts[l] % sizes[l] != 0)
      throw Error(where, "size " + std::to_string(sizes[l]) + " does not divide the level's " +
                             std::to_string(span->counts[l]) + " workers");
  const auto coords = group_coordinates(topology, ep, *span);
  // Key: the domain block at every level, then the offset in it at every level.
  auto key = [&](int i) {
    std::vector<int> k;
    for (size_t l = 0; l < sizes.size(); ++l) k.push_back(coords[i][l] / sizes[l]);
    for (size_t l = 0; l < sizes.size(); ++l) k.push_back(coords[i][l] % sizes[l]);
    return k;
  };
  std::vector<int> order = identity(static_cast<int>(ep.size()));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

std::vector<std::vector<int>> hybrid_orders(const LayerSetup& setup,
                                            const core::RankGroups& groups) {
  const Strategy& s = setup.strategy;
  if (s.expert_transfer != ExpertTransfer::kHybrid || s.hybrid_levels.empty()) return {};
  if (setup.cluster.levels.empty())
    throw Error("strategy: hybrid_levels", "needs the cluster's levels to place the domains");
  const core::Topology topology(setup.cluster);
  std::vector<std::vector<int>> out;
  for (const core::RankGroup& g : groups.ep)
    out.push_back(hybrid_member_order(topology, g, s.hybrid_levels, "strategy: hybrid_levels"));
  return out;
}

std::vector<core::RankGroup> hybrid_domains(const core::RankGroups& groups, int domain,
                                            const std::vector<std::vector<int>>& orders) {
  std::vector<core::RankGroup> out;
  for (size_t k = 0; k < groups.ep.size(); ++k) {
    const core::RankGroup& g = groups.ep[k];
    const std::vector<int> order =
        k < orders.size() && !orders[k].empty() ? orders[k] : identity(int(g.size()));
    for (size_t d = 0; d + domain <= g.size(); d += domain) {
      core::RankGroup members;
      for (size_t p = d; p < d + domain; ++p) members.push_back(g[size_t(order[p])]);
      out.push_back(std::move(members));
    }
  }
  return out;
}

std::vector<double> hybrid_pairs(const std::vector<double>& pairs, int n, int domain,
                                 const std::vector<int>& order) {
  const HybridRouting routing(n, domain, order, "strategy: hybrid_domain");
  std::vector<double> out(pairs.size(), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const int to = routing.destination(i, routing.position(j) / domain);
      out[size_t(i) * n + to] += pairs[size_t(i) * n + j];
    }
  return out;
}

void build_hybrid_prefetch(BuildContext& ctx) {
  const int domain = ctx.strategy.hybrid_domain;
  // AllGather output: the domain's experts, each rank's shard compressed by SR (HybridEP
  // Sec. III-D: shared + top-k residual; the ratio is bytes sent per parameter byte).
  // The executors encode and decode by the op's codec, not the strategy.
  WireCodec codec = plain_codec(ctx);
  codec.compression = effective_compression(ctx.strategy);
  codec.shared_reference = codec.compression < 1 && ctx.strategy.shared_expert;
  codec.error_feedback = codec.compression < 1 && ctx.strategy.sr_feedback;
  const double bytes = domain * ctx.work.expert_param_bytes * codec.compression;
  const std::vector<core::RankGroup> domains =
      hybrid_domains(ctx.groups, domain, ctx.hybrid_orders);
  // The asynchronous communicator (Fig. 10) queues every layer's AllGather at the step's
  // start; the copy stream runs them layer after layer, beside the pre-expert compute.
  const Frontier done = group_step(
      ctx, domains, OpKind::kAllGather, std::vector<double>(domains.size(), bytes), kCopyStream,
      ctx.label(OpRole::kExpertTransferAllGather, "hybrid"), ctx.step_start, 0, codec);
  for (int r = 0; r < ctx.world(); ++r)
    if (ctx.active(r)) ctx.prefetch[r] = done[r] == ctx.step_start[r] ? kNone : done[r].front();
}

std::vector<OpId> build_hybrid_grad_return(BuildContext& ctx, const Frontier& after) {
  const int domain = ctx.strategy.hybrid_domain;
  // ReduceScatter input: the gradients of every gathered copy (the domain's experts).
  const double bytes = domain * ctx.work.expert_grad_bytes;
  Frontier done = group_step(ctx, hybrid_domains(ctx.groups, domain, ctx.hybrid_orders),
                             OpKind::kReduceScatter, bytes, kCopyStream,
                             ctx.label(OpRole::kExpertTransferGradReduceScatter, "hybrid"), after);
  const std::vector<OpId> grads = last_of(done);
  if (effective_compression(ctx.strategy) < 1 && ctx.strategy.shared_expert) {
    // SR (Sec. IV-B): the shared expert, one expert's parameters, AllReduced over the EP
    // group in the backward on the same stream; the expert gradients do not wait for it.
    const double local = static_cast<double>(ctx.setup.model.experts) / ctx.setup.parallel.ep;
    group_step(ctx, ctx.groups.ep, OpKind::kAllReduce, ctx.work.expert_param_bytes / local,
               kCopyStream, ctx.label(OpRole::kExpertTransferSharedAllReduce, "hybrid"), done);
  }
  return grads;
}

}  // namespace moecomm::sched

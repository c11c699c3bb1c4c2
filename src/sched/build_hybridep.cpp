#include "sched/build_hybridep.h"

namespace moecomm::sched {

std::vector<core::RankGroup> hybrid_domains(const core::RankGroups& groups, int domain) {
  std::vector<core::RankGroup> out;
  for (const auto& g : groups.ep)
    for (size_t d = 0; d + domain <= g.size(); d += domain)
      out.emplace_back(g.begin() + d, g.begin() + d + domain);
  return out;
}

std::vector<double> hybrid_pairs(const std::vector<double>& pairs, int n, int domain) {
  std::vector<double> out(pairs.size(), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      // Same domain: computed on i with the gathered experts. Other domain: to the member
      // of j's domain at i's offset.
      const int to = i / domain == j / domain ? i : (j / domain) * domain + i % domain;
      out[size_t(i) * n + to] += pairs[size_t(i) * n + j];
    }
  return out;
}

void build_hybrid_prefetch(BuildContext& ctx) {
  const int domain = ctx.strategy.hybrid_domain;
  // AllGather output: the domain's experts, each rank's shard compressed by SR (HybridEP
  // Sec. III-D: shared + top-k residual; the ratio is bytes sent per parameter byte).
  const double bytes = domain * ctx.work.expert_param_bytes * ctx.strategy.compression;
  const Frontier done =
      group_step(ctx, hybrid_domains(ctx.groups, domain), OpKind::kAllGather, bytes, kCopyStream,
                 ctx.label("moe.hybrid.expert_allgather", "hybrid"), ctx.ready);
  for (int r = 0; r < ctx.world(); ++r)
    ctx.prefetch[r] = done[r] == ctx.ready[r] ? kNone : done[r].front();
}

std::vector<OpId> build_hybrid_grad_return(BuildContext& ctx, const Frontier& after) {
  const int domain = ctx.strategy.hybrid_domain;
  // ReduceScatter input: the gradients of every gathered copy (the domain's experts).
  const double bytes = domain * ctx.work.expert_grad_bytes;
  const Frontier done =
      group_step(ctx, hybrid_domains(ctx.groups, domain), OpKind::kReduceScatter, bytes,
                 kCopyStream, ctx.label("moe.hybrid.grad_reducescatter", "hybrid"), after);
  return last_of(done);
}

}  // namespace moecomm::sched

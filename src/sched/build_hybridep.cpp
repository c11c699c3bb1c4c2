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
  // The asynchronous communicator (Fig. 10) queues every layer's AllGather at the step's
  // start; the copy stream runs them layer after layer, beside the pre-expert compute.
  const Frontier done =
      group_step(ctx, hybrid_domains(ctx.groups, domain), OpKind::kAllGather, bytes, kCopyStream,
                 ctx.label("moe.hybrid.expert_allgather", "hybrid"), ctx.step_start);
  for (int r = 0; r < ctx.world(); ++r)
    ctx.prefetch[r] = done[r] == ctx.step_start[r] ? kNone : done[r].front();
}

std::vector<OpId> build_hybrid_grad_return(BuildContext& ctx, const Frontier& after) {
  const int domain = ctx.strategy.hybrid_domain;
  // ReduceScatter input: the gradients of every gathered copy (the domain's experts).
  const double bytes = domain * ctx.work.expert_grad_bytes;
  Frontier done =
      group_step(ctx, hybrid_domains(ctx.groups, domain), OpKind::kReduceScatter, bytes,
                 kCopyStream, ctx.label("moe.hybrid.grad_reducescatter", "hybrid"), after);
  const std::vector<OpId> grads = last_of(done);
  if (ctx.strategy.compression < 1 && ctx.strategy.shared_expert) {
    // SR (Sec. IV-B): the shared expert, one expert's parameters, AllReduced over the EP
    // group in the backward on the same stream; the expert gradients do not wait for it.
    const double local = static_cast<double>(ctx.setup.model.experts) / ctx.setup.parallel.ep;
    group_step(ctx, ctx.groups.ep, OpKind::kAllReduce, ctx.work.expert_param_bytes / local,
               kCopyStream, ctx.label("moe.hybrid.shared_allreduce", "hybrid"), done);
  }
  return grads;
}

}  // namespace moecomm::sched

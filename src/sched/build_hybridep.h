#pragma once
// HybridEP (expert_transfer=hybrid): inside an expert domain of hybrid_domain consecutive EP
// ranks experts travel (AllGather, compressed, prefetched); across domains tokens travel (A2A).
#include <vector>

#include "sched/build_context.h"

namespace moecomm::sched {

// The domains of every EP group: hybrid_domain consecutive members each.
std::vector<core::RankGroup> hybrid_domains(const core::RankGroups& groups, int domain);

// HybridEP Definition 1 on a dispatch matrix of n members with domains of `domain`: what a
// member sends into its own domain stays (its experts are gathered: the diagonal); what it
// sends to another domain goes, summed, to the member of that domain with its own offset
// (Algorithm 1: A2A between equal offsets). Uniform D gives (G - S) / G of D by A2A.
std::vector<double> hybrid_pairs(const std::vector<double>& pairs, int n, int domain);

// Forward, at the start of a layer: the domain AllGather of the experts' parameters times the
// compression ratio on the copy stream, before the attention so it hides under the
// pre-expert compute (HybridEP Eq. 7); sets ctx.prefetch (the experts wait for it).
void build_hybrid_prefetch(BuildContext& ctx);
// Backward, after the expert gradients (`after`): the gathered copies' gradients return to
// their owners by a ReduceScatter over the domain (uncompressed) on the copy stream. Returns
// the ops after which the rank's expert gradients are complete.
std::vector<OpId> build_hybrid_grad_return(BuildContext& ctx, const Frontier& after);

}  // namespace moecomm::sched

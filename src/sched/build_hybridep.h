#pragma once
// HybridEP (expert_transfer=hybrid): inside an expert domain of hybrid_domain consecutive EP
// ranks experts travel (AllGather, compressed, prefetched); across domains tokens travel (A2A).
#include <vector>

#include <string>

#include "core/topology.h"
#include "sched/build_context.h"

namespace moecomm::sched {

// HybridEP's location renumbering (Sec. IV-A) for domain sizes per level the EP group `ep`
// spans (outermost first, each dividing its level's count in the group): order[position] =
// EP member, such that every domain (the members whose coordinate at each level falls in
// one block of its size) is `domain` consecutive positions, and the members at equal offsets
// (the A2A peers of Algorithm 1) sit at equal positions of every block. Empty sizes: the
// identity (blocks of consecutive members). Throws moecomm::Error naming `where` when the
// sizes do not fit the group's levels.
std::vector<int> hybrid_member_order(const core::Topology& topology, const core::RankGroup& ep,
                                     const std::vector<int>& sizes, const std::string& where);

// The member order of every EP group for the setup's strategy: hybrid_member_order on the
// setup's cluster with strategy.hybrid_levels; empty orders without them.
std::vector<std::vector<int>> hybrid_orders(const LayerSetup& setup,
                                            const core::RankGroups& groups);

// The domains of every EP group: hybrid_domain consecutive positions of its order each
// (orders[k] for group k; an empty order is the identity).
std::vector<core::RankGroup> hybrid_domains(const core::RankGroups& groups, int domain,
                                            const std::vector<std::vector<int>>& orders);

// HybridEP Definition 1 on a dispatch matrix of n members with domains of `domain`
// consecutive positions of `order` (empty: the identity): each member's bytes for member j go,
// summed, where HybridRouting sends a row for j's experts (its own domain: the diagonal; another
// domain: that domain's member at its offset). Uniform D gives (G - S) / G of D by A2A.
std::vector<double> hybrid_pairs(const std::vector<double>& pairs, int n, int domain,
                                 const std::vector<int>& order = {});

// Forward, at the start of a layer: the domain AllGather of the experts' parameters times the
// compression ratio on the copy stream, before the attention so it hides under the
// pre-expert compute (HybridEP Eq. 7); sets ctx.prefetch (the experts wait for it).
void build_hybrid_prefetch(BuildContext& ctx);
// Backward, after the expert gradients (`after`): the gathered copies' gradients return to
// their owners by a ReduceScatter over the domain (uncompressed) on the copy stream. Returns
// the ops after which the rank's expert gradients are complete.
std::vector<OpId> build_hybrid_grad_return(BuildContext& ctx, const Frontier& after);

}  // namespace moecomm::sched

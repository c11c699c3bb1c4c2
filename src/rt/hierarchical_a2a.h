#pragma once
// Hierarchical A2A-v on real buffers, routed as the simulator's flows are
// (sim/collective_flows.h), so measured and predicted traffic agree phase by phase:
//   2DH (Tutel): intra-node A2A that gathers, on the member with local index l, everything
//     its node sends to local index l anywhere; then inter-node A2A among equal local indices.
//   1DH (HetuMoE): on-node blocks go directly and off-node ones to the node's first member;
//     the leaders exchange; the leaders scatter.
// Every member derives the same plan from the full count matrix (exchanged first), so message
// sizes are known on both ends and the result equals flat A2A-v exactly.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "rt/collectives.h"

namespace moecomm::rt {

// One message of a phase: member `from` sends member `to` the blocks (src, dst), in order.
struct Transfer {
  int from = 0;
  int to = 0;
  std::vector<std::pair<int, int>> blocks;
};
using ExchangePhase = std::vector<Transfer>;

// Member indices grouped by node (nodes in ascending order); empty when the nodes hold
// different numbers of members, where hierarchical routing does not apply.
std::vector<std::vector<int>> members_by_node(const core::RankGroup& group, int ranks_per_node);

std::vector<ExchangePhase> two_dh_plan(const std::vector<std::vector<int>>& nodes);
std::vector<ExchangePhase> one_dh_plan(const std::vector<std::vector<int>>& nodes);

// Runs `plan` with point-to-point messages on `comm`; counts are allgathered first.
Received<std::byte> routed_all_to_all(const Comm& comm, std::span<const std::byte> send,
                                      std::span<const int64_t> send_counts,
                                      const std::vector<ExchangePhase>& plan,
                                      const CallOptions& options);

}  // namespace moecomm::rt

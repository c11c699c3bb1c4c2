#pragma once
// Collective algorithms as data (DESIGN.md "One schedule, three executors"): an A2A-v over a
// group is lowered here, once per layout, into its routing plan, the steps in which members
// forward blocks (src, dst) to one another. The plan depends on the group and the node size
// only, never on the counts: the simulator prices each step as flows of the blocks' bytes
// (sim/collective_flows.h), the MPI runtime and moecomm.torch run the steps with
// point-to-point messages (rt/routed_a2a.h, moecomm/torch/collectives.py). A new A2A
// algorithm is its entry in kA2ARoutings (a2a_routing.cpp) and its plan function: no executor
// changes.
//   flat: one step, every block straight to its destination (a plain A2A-v).
//   pairwise: n-1 steps; in step k member i sends its block for member (i+k) mod n, so each
//     member sends once and receives once per step (NCCL's point-to-point A2A).
//   2dh (Tutel): inside each node, the member of local index l gathers every block its node
//     sends to local index l anywhere; then members of equal local index exchange.
//   1dh (HetuMoE): on-node blocks go straight to their member and off-node ones to the node's
//     first member; the first members exchange; they scatter inside their node.
//   dedup (DeepEP's normal kernels): a token crosses to each destination node once, to the
//     member there of its source's local index (the counterpart), which fans it out to the
//     node's members that hold its experts; on-node blocks go straight. The combine runs the
//     other way: the node's members send their outputs to the counterpart, which reduces them
//     per token and crosses once. The crossing carries node blocks (Collective::node_bytes:
//     one row per token and node), not pair blocks, so the plan depends on the direction.
// Hierarchical plans need the same number of members on every node and at least two nodes;
// otherwise the group gains nothing and runs the flat plan (A2ARouting::algorithm says so).
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rank_groups.h"
#include "sched/op.h"

namespace moecomm::sched {

// A block of an A2A-v: the bytes (rows) member src sends member dst.
using Block = std::pair<int, int>;

// One message of a step: member `from` sends member `to` these blocks, concatenated in order.
struct RoutedTransfer {
  int from = 0;
  int to = 0;
  std::vector<Block> blocks;
  // dedup: entries of Collective::node_bytes, (from, to) of the hop that carries them.
  std::vector<Block> node_blocks = {};
  bool operator==(const RoutedTransfer&) const = default;
};
// The messages of one step run at once; a step starts when the one before it has ended.
using RoutingStep = std::vector<RoutedTransfer>;

struct A2ARouting {
  Algorithm algorithm = Algorithm::kFlat;  // as run: kFlat where a hierarchy does not apply
  int members = 0;
  std::vector<RoutingStep> steps;
  A2ADirection direction = A2ADirection::kDispatch;
  std::vector<int> node = {};  // hierarchical plans: member -> node index; empty otherwise
  // One step in which every block goes straight from its source to its destination: a plain
  // A2A-v, which executors may hand to their backend's own A2A.
  bool direct() const;
  // dedup: the pair blocks (src, dst) a node block (from, to) of this plan stands for, in
  // member order. A pair block holds its rows once per token: dispatch, src's tokens for
  // dst's experts; combine, src's expert outputs for dst's tokens, summed per token. A node
  // block between two members of one node is their pair block; across nodes it is the union
  // of the pairs whose far member shares the node block's far member's node (dispatch: from's
  // pairs to every member of to's node, each token once; combine: every member of from's
  // node's pairs to `to`, summed per token).
  std::vector<Block> node_block_pairs(Block node_block) const;
};

// The A2A algorithms, in the order the a2a knob lists them.
struct A2AAlgorithmInfo {
  Algorithm algorithm;
  std::string_view name;  // the a2a knob's value, e.g. "2dh"
  // Whether its plan moves (src, dst) blocks only, so that the executors' generic routed A2A
  // runs it (rt/routed_a2a.h, moecomm.torch): every plan but dedup's, whose node blocks need
  // the rows deduplicated by token.
  bool moves_blocks = true;
};
const std::vector<A2AAlgorithmInfo>& a2a_algorithms();
bool is_a2a_algorithm(Algorithm algorithm);

// The plan of `algorithm` (an A2A algorithm) over `group` (global ranks; member i is
// group[i]), where ranks r and s share a node when r / ranks_per_node == s / ranks_per_node.
// Transfers from a member to itself are left out. Throws moecomm::Error on an algorithm that
// is not an A2A algorithm or ranks_per_node < 1.
// `direction` matters to dedup only (the other plans are their own reverse).
A2ARouting a2a_routing(Algorithm algorithm, const core::RankGroup& group, int ranks_per_node,
                       A2ADirection direction = A2ADirection::kDispatch);
// The same, computed once per (algorithm, group, ranks_per_node, direction) and shared:
// executors call this on every A2A. Thread-safe.
std::shared_ptr<const A2ARouting> cached_a2a_routing(
    Algorithm algorithm, const core::RankGroup& group, int ranks_per_node,
    A2ADirection direction = A2ADirection::kDispatch);

// Member indices grouped by node (nodes ascending); empty where nodes hold different numbers
// of members. Throws moecomm::Error where ranks_per_node < 1.
std::vector<std::vector<int>> members_by_node(const core::RankGroup& group, int ranks_per_node);

// The bytes a transfer carries given the A2A's per-pair bytes (n x n row-major) and, for
// dedup, its node_bytes (n x n).
double transfer_bytes(const RoutedTransfer& transfer, const std::vector<double>& pair_bytes,
                      int members, const std::vector<double>& node_bytes = {});

}  // namespace moecomm::sched

#pragma once
// The bytes of a2a=dedup under balanced routing (sched/a2a_routing.h "dedup"): a token crosses
// to a node once if any of its top-k experts is there, and reaches a member once if any is
// there, where the flat A2A sends one row per (token, expert). With node-limited routing
// (DeepSeek-V3's group-limited top-k) a token's experts lie in at most router_group_top_k
// groups, so fewer nodes see it.
#include <cstdint>
#include <vector>

#include "core/rank_groups.h"

namespace moecomm::sched {

struct RouterShape {
  int64_t experts = 0;
  int top_k = 1;
  int groups = 1;       // the router's expert groups, contiguous and equal (ModelConfig)
  int group_top_k = 0;  // the groups a token may pick its experts from; 0: every group
};

// The probability that a token picks at least one expert of `experts_in_set`, the count of the
// set's experts in each router group, when it picks group_top_k groups uniformly at random and
// then top_k distinct experts uniformly among theirs (balanced routing, as LayerWorkload
// assumes). Exact: a sum over the number of the set's experts the chosen groups hold.
double hit_probability(const RouterShape& router, const std::vector<int64_t>& experts_in_set);

// Per EP group member i (of `group`, experts split contiguously and evenly over the members),
// the dedup A2A's dispatch matrices for tokens of `row_bytes_per_token` each (n x n, row-major):
// pair[i * n + j], the rows i's tokens reach member j as (once per token with an expert
// there); node[i * n + j], what i itself sends j (sched::CollectiveSpec::node_bytes): pair to
// the members of its node, once per token and node to its counterpart on another node.
// Ranks r and s share a node when r / ranks_per_node == s / ranks_per_node; nodes of unequal
// shares run the flat plan, and node then equals pair.
struct DedupMatrices {
  std::vector<double> pair, node;
};
DedupMatrices dedup_matrices(const RouterShape& router, const core::RankGroup& group,
                             int ranks_per_node, double row_bytes_per_token);

}  // namespace moecomm::sched

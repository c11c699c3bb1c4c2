#pragma once
// Synthetic routing traces with the two kinds of locality NetMoE exploits (Sec. 3.1): a
// sample's tokens favour a few experts (data locality, so num_{i,e} of Eq. 2 is skewed per
// sample), and that preference carries from layer to layer (so placement chosen from one
// layer's routing, or predicted from earlier iterations, stays good for the next).
//
// Model. Experts have a Zipf popularity per layer l: p_l(e) proportional to
// 1 / (rank_l(e) + 1)^skew, rank_l a random permutation of the experts. pi_l, a random
// permutation of the experts, maps layer l to layer l + 1. Both are drawn from the seed once
// and shared by all iterations (a predictor can learn them from earlier iterations).
// For each iteration and sample:
//   - layer 0: the preferred set is `preferred` distinct experts drawn from p_0;
//   - layer l + 1: with probability layer_correlation it is pi_l(preferred set at l),
//     otherwise a fresh draw of `preferred` distinct experts from p_{l+1}.
// For each token at layer l: with probability locality its top_k distinct experts are drawn
// uniformly from the sample's preferred set (all of it, filled up from p_l, when
// preferred < top_k); otherwise they are top_k distinct experts drawn from p_l.
// "Distinct experts drawn from p" means successive draws from p renormalized over the
// experts not yet chosen.
// Node-limited routing (router_groups > 1, 0 < router_group_top_k < router_groups: DeepSeek-V3
// Sec. 2.1.2, core::ModelConfig's keys): expert e is in group e / (experts / router_groups), and
// a token's experts lie in at most router_group_top_k groups. Its experts are taken in the
// order above (preferred ones first: a token's most affine), each draw renormalized over the
// experts that keep it within the limit: once a token holds router_group_top_k groups, a
// preferred expert of another group is passed over and the fill-up draws come from p_l
// renormalized over its groups' experts; with preferred > top_k, the top_k picks are uniform
// among the preferred experts so allowed. Without a limit the generator is the one above,
// draw for draw.
//
// Deterministic for a seed on every platform: std::mt19937_64 with hand-written uniform and
// discrete sampling (std:: distributions are implementation-defined). Generation is
// sequential, so the first iterations do not depend on how many are generated.
#include <cstdint>

#include "place/routing_trace.h"

namespace moecomm::place {

struct SyntheticRoutingSpec {
  int samples = 128;
  int tokens = 1024;
  int experts = 64;
  int top_k = 2;
  int layers = 12;
  int iterations = 1;
  double locality = 0.5;           // share of a sample's tokens routed to its preferred experts
  int preferred = 2;               // experts a sample prefers at each layer
  double skew = 1.0;               // Zipf exponent of expert popularity (0 = uniform)
  double layer_correlation = 0.8;  // chance a sample's preference at l+1 follows the one at l
  uint64_t seed = 1;
  int router_groups = 1;       // node-limited routing (above)
  int router_group_top_k = 0;  // 0: every group
};

// Throws Error naming the field, e.g. "synthetic routing: locality: must be in [0, 1], got
// 1.5". Bounds: shapes positive, experts <= 1000000, top_k and preferred <= experts, at most
// 2^31 ids in all, skew in [0, 10]; router_groups and router_group_top_k by
// core::router_groups_problem ("synthetic routing: router_groups: ...").
void validate(const SyntheticRoutingSpec& spec);

// Validates, then generates iterations x layers x samples x tokens x top_k ids.
RoutingTrace generate_routing_trace(const SyntheticRoutingSpec& spec);

}  // namespace moecomm::place

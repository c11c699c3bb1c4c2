// a2a=dedup: its routing plan, and its bytes against brute force over every routing a token
// can take (hit_probability) and by hand on a fixture (one row per token and destination node).
#include "sched/dedup_traffic.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "sched/a2a_routing.h"
#include "sched/layer_builder.h"
#include "sched/strategy.h"
#include "support/expect_error.h"
#include "support/tiny_moe.h"

namespace moecomm::sched {
namespace {

// Every subset of `n` items of size `k`, as bit masks.
std::vector<unsigned> subsets(int n, int k) {
  std::vector<unsigned> out;
  for (unsigned m = 0; m < (1u << n); ++m)
    if (__builtin_popcount(m) == k) out.push_back(m);
  return out;
}

// The same probability by enumeration: every group choice, then every expert choice among them,
// equally likely.
double brute_force(const RouterShape& r, const std::set<int>& set) {
  const int per_group = int(r.experts / r.groups);
  const int m = r.group_top_k == 0 ? r.groups : r.group_top_k;
  double hit = 0, all = 0;
  for (unsigned groups : subsets(r.groups, m)) {
    std::vector<int> allowed;
    for (int e = 0; e < r.experts; ++e)
      if (groups >> (e / per_group) & 1) allowed.push_back(e);
    const auto picks = subsets(int(allowed.size()), r.top_k);
    double h = 0;
    for (unsigned p : picks) {
      bool any = false;
      for (size_t i = 0; i < allowed.size(); ++i) any |= (p >> i & 1) && set.count(allowed[i]);
      h += any;
    }
    hit += h / double(picks.size());
    all += 1;
  }
  return hit / all;
}

std::vector<int64_t> per_group(const RouterShape& r, const std::set<int>& set) {
  std::vector<int64_t> out(size_t(r.groups), 0);
  for (int e : set)
    if (e < r.experts) ++out[size_t(e / (r.experts / r.groups))];  // the router's experts only
  return out;
}

TEST(DedupTraffic, HitProbabilityEqualsBruteForce) {
  const std::vector<RouterShape> routers = {{8, 2, 1, 0},  {8, 2, 4, 2},  {12, 3, 4, 2},
                                            {16, 4, 8, 4}, {16, 4, 4, 1}, {12, 2, 3, 3}};
  const std::vector<std::set<int>> sets = {{0}, {0, 1}, {2, 3, 4, 5}, {1, 6, 7}, {0, 4, 8}};
  for (const RouterShape& r : routers)
    for (const auto& set : sets)
      EXPECT_NEAR(hit_probability(r, per_group(r, set)), brute_force(r, set), 1e-12)
          << "E " << r.experts << " k " << r.top_k << " groups " << r.groups << "/" << r.group_top_k
          << " set of " << set.size();
}

TEST(DedupTraffic, NodeLimitedRoutingReachesAtMostItsGroups) {
  // Groups = the 4 nodes' experts, 2 of them per token: the expected number of nodes a token
  // crosses to is the sum of their hit probabilities, at most 2; unlimited it is larger.
  for (int k : {2, 4, 8}) {
    const RouterShape limited{32, k, 4, 2}, free{32, k, 4, 0};
    double nodes_limited = 0, nodes_free = 0;
    for (int node = 0; node < 4; ++node) {
      std::vector<int64_t> in(4, 0);
      in[size_t(node)] = 8;
      nodes_limited += hit_probability(limited, in);
      nodes_free += hit_probability(free, in);
    }
    EXPECT_LE(nodes_limited, 2.0 + 1e-12) << "k " << k;
    EXPECT_GT(nodes_free, nodes_limited) << "k " << k;
  }
  // One group per token: every token reaches exactly one node.
  double one = 0;
  for (int node = 0; node < 4; ++node) {
    std::vector<int64_t> in(4, 0);
    in[size_t(node)] = 8;
    one += hit_probability({32, 8, 4, 1}, in);
  }
  EXPECT_NEAR(one, 1.0, 1e-12);
}

TEST(DedupTraffic, RefusesRoutersThatCannotPick) {
  EXPECT_ERROR_HAS(hit_probability({8, 3, 4, 1}, {1, 0, 0, 0}), "a2a=dedup", "top_k");
  EXPECT_ERROR_HAS(hit_probability({8, 2, 3, 1}, {1, 0, 0}), "a2a=dedup", "router_groups 3");
}

// 2 nodes x 4 members. Dispatch: step 1 sends on-node rows straight and one message per member
// to its counterpart on the other node; step 2 fans them out. Every off-node (src, dst) pair
// but the counterpart's arrives in step 2, once; the combine runs the same hops backwards.
TEST(DedupRouting, CrossesOncePerNodeAndFansOut) {
  const core::RankGroup group = {0, 1, 2, 3, 4, 5, 6, 7};
  const A2ARouting d = a2a_routing(Algorithm::kDedup, group, 4, A2ADirection::kDispatch);
  ASSERT_EQ(d.algorithm, Algorithm::kDedup);
  ASSERT_EQ(d.steps.size(), 2u);
  std::map<std::pair<int, int>, int> crossing, fanned;
  for (const RoutedTransfer& t : d.steps[0]) {
    ASSERT_TRUE(t.blocks.empty());
    ASSERT_EQ(t.node_blocks, (std::vector<Block>{Block{t.from, t.to}}));
    if (t.from / 4 != t.to / 4) {
      EXPECT_EQ(t.to, (t.from + 4) % 8);  // the counterpart: same local index
      ++crossing[{t.from, t.to}];
    }
  }
  EXPECT_EQ(crossing.size(), 8u);
  EXPECT_EQ(d.steps[0].size(), 8u + 8 * 3);
  for (const RoutedTransfer& t : d.steps[1]) {
    EXPECT_EQ(t.from / 4, t.to / 4);  // inside the node
    EXPECT_TRUE(t.node_blocks.empty());
    for (const Block& b : t.blocks) ++fanned[b];
  }
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      const int times = fanned[Block(i, j)];
      EXPECT_EQ(times, i / 4 != j / 4 && j != (i + 4) % 8 ? 1 : 0) << i << " -> " << j;
    }

  const A2ARouting c = a2a_routing(Algorithm::kDedup, group, 4, A2ADirection::kCombine);
  ASSERT_EQ(c.steps.size(), 2u);
  for (const RoutedTransfer& t : c.steps[0]) EXPECT_TRUE(t.node_blocks.empty());
  for (const RoutedTransfer& t : c.steps[1])
    EXPECT_EQ(t.node_blocks, (std::vector<Block>{Block{t.from, t.to}}));
  EXPECT_EQ(c.steps[1].size(), 8u + 8 * 3);  // the crossings and the on-node outputs
  // One node: the flat plan.
  EXPECT_EQ(a2a_routing(Algorithm::kDedup, {0, 1, 2, 3}, 4).algorithm, Algorithm::kFlat);
}

// The fixture: tiny-moe (h 64, bf16, 2 x 32 tokens per rank, 8 experts top-2) on 2 nodes x 4,
// EP 8: one expert per member. A token reaches a member with probability 1 - C(7,2)/C(8,2) =
// 1/4 and a node (4 experts) with 1 - C(4,2)/C(8,2) = 22/28: the forward dispatch's node bytes
// to the counterpart are 64 tokens x 128 bytes x 22/28 (the flat A2A's: 64 x 2 x 128 x 4/8).
// Node-limited to one of 2 groups (a group = a node's experts): a token reaches the other node
// with probability 1/2, a member with 1/2 x (1 - C(3,2)/C(4,2)) = 1/4. In fp8 a row is 64
// bytes and one fp32 scale.
TEST(DedupTraffic, ForwardDispatchBytesPerLevelAreExact) {
  struct Case {
    int groups, group_top_k;
    double member, node;
    const char* strategy;
    double row;  // bytes of a token row on the wire: h x bf16, or fp8: h + one fp32 scale
  };
  for (const Case& k : {Case{1, 0, 0.25, 22.0 / 28.0, "a2a=dedup", 64 * 2},
                        Case{2, 1, 0.25, 0.5, "a2a=dedup", 64 * 2},
                        Case{1, 0, 0.25, 22.0 / 28.0, "a2a=dedup,a2a_dtype=fp8", 64 + 4}}) {
    LayerSetup s;
    s.cluster = testing::tiny_cluster();
    s.model = testing::tiny_moe_model();
    s.model.router_groups = k.groups;
    s.model.router_group_top_k = k.group_top_k;
    s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=8", "-"), 8, 8, "-");
    s.strategy = parse_strategy(k.strategy, "-");
    s.layers = 1;
    const Schedule sched = build_training_step(s);
    int seen = 0;
    const double row = k.row;
    for (CollectiveId id = 0; id < sched.num_collectives(); ++id) {
      const Collective& c = sched.collective(id);
      const Label& l = sched.label(c.ops.front());
      if (l.role != OpRole::kDispatchA2A || l.phase != Phase::kForward) continue;
      ++seen;
      EXPECT_EQ(c.algorithm, Algorithm::kDedup);
      EXPECT_EQ(c.direction, A2ADirection::kDispatch);
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) {
          EXPECT_NEAR(c.pair(i, j), 64 * row * k.member, 1e-9) << i << " -> " << j;
          const double node = i / 4 == j / 4     ? 64 * row * k.member
                              : j == (i + 4) % 8 ? 64 * row * k.node
                                                 : 0.0;
          EXPECT_NEAR(c.node_bytes[size_t(i) * 8 + j], node, 1e-9) << i << " -> " << j;
        }
      // What a rank sends of its own: 3 members of its node and one crossing.
      EXPECT_NEAR(sched.op(c.ops[0]).bytes, 64 * row * (3 * k.member + k.node), 1e-9);
    }
    EXPECT_EQ(seen, 1) << "groups " << k.groups;
    // Both phases: the ops labelled dispatch run the dispatch plan toward the experts (the
    // backward's carry the combine's gradients), those labelled combine the combine plan.
    for (CollectiveId id = 0; id < sched.num_collectives(); ++id) {
      const Collective& c = sched.collective(id);
      const OpRole role = sched.label(c.ops.front()).role;
      if (role == OpRole::kDispatchA2A) {
        EXPECT_EQ(c.direction, A2ADirection::kDispatch);
      } else if (role == OpRole::kCombineA2A) {
        EXPECT_EQ(c.direction, A2ADirection::kCombine);
        // The transpose: the counterpart (4) brings member 0's outputs home.
        EXPECT_NEAR(c.node_bytes[size_t(4) * 8 + 0], 64 * row * k.node, 1e-9);
      }
    }
  }
}

// dedup composes with chunks (each chunk's A2A carries its share) and with MoNTA's TP drop
// (each TP member sends 1 / tp of the rows): the forward dispatch's node bytes, summed over
// its chunks and groups, are the unchunked ones, and the drop's are the replicated ones / tp.
TEST(DedupTraffic, ComposesWithChunksAndTheTpDrop) {
  const auto node_bytes = [](const std::string& strategy) {
    LayerSetup s;
    s.cluster = testing::tiny_cluster();
    s.model = testing::tiny_moe_model();
    s.parallel = core::resolve_parallel(core::parse_parallel_spec("tp=2,ep=4", "-"), 8, 8, "-");
    s.strategy = parse_strategy(strategy, "-");
    s.layers = 1;
    const Schedule sched = build_training_step(s);
    double sum = 0;
    for (CollectiveId id = 0; id < sched.num_collectives(); ++id) {
      const Collective& c = sched.collective(id);
      const Label& l = sched.label(c.ops.front());
      if (l.role != OpRole::kDispatchA2A || l.phase != Phase::kForward) continue;
      EXPECT_EQ(c.algorithm, Algorithm::kDedup) << strategy;
      for (double b : c.node_bytes) sum += b;
    }
    return sum;
  };
  const double replicated = node_bytes("a2a=dedup");
  ASSERT_GT(replicated, 0);
  EXPECT_NEAR(node_bytes("a2a=dedup,chunks=2"), replicated, 1e-9 * replicated);
  EXPECT_NEAR(node_bytes("base=monta-o1,a2a=dedup"), replicated / 2, 1e-9 * replicated);
  EXPECT_NEAR(node_bytes("base=monta-o1,a2a=dedup,chunks=2"), replicated / 2, 1e-9 * replicated);
}

}  // namespace
}  // namespace moecomm::sched

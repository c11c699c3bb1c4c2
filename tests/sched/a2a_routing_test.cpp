#include "sched/a2a_routing.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "sched/strategy.h"

namespace moecomm::sched {
namespace {

struct Layout {
  core::RankGroup group;
  int ranks_per_node;
};

const std::vector<Layout> kLayouts = {
    {{0}, 1},
    {{0, 1}, 1},
    {{0, 1, 2, 3}, 2},
    {{0, 1, 2, 3, 4, 5}, 2},
    {{0, 1, 2, 3, 4, 5}, 3},
    {{0, 1, 2}, 2},
    {{3, 2, 1, 0}, 2},
    {{0, 2, 4, 6}, 2},
    {{0, 1, 2, 3, 4, 5, 6, 7}, 4},
    {{0, 1, 2, 3, 4, 5, 6, 7}, 8},
    {{5, 1, 7, 3}, 4},
};

std::string where(Algorithm a, const Layout& l) {
  std::string g;
  for (int r : l.group) g += std::to_string(r) + " ";
  return std::string(to_string(a)) + " over [" + g + "] with " + std::to_string(l.ranks_per_node) +
         " ranks per node";
}

// Brute force: follow every block through the steps; a member forwards only what it holds,
// and every block ends at its destination having moved at most once per step. A dedup node
// block (x, y) moves what x holds for y: on x's node or in the combine, the blocks bound for y;
// across nodes in the dispatch, every block bound for y's node (the tokens, once per node).
TEST(A2ARouting, EveryPlanDeliversEveryBlockOnce) {
  for (const A2AAlgorithmInfo& info : a2a_algorithms()) {
    for (const Layout& l : kLayouts) {
      for (A2ADirection direction : {A2ADirection::kDispatch, A2ADirection::kCombine}) {
        const A2ARouting r = a2a_routing(info.algorithm, l.group, l.ranks_per_node, direction);
        const int n = static_cast<int>(l.group.size());
        const auto node = [&](int member) { return l.group[size_t(member)] / l.ranks_per_node; };
        ASSERT_EQ(r.members, n) << where(info.algorithm, l);
        std::map<Block, int> at;
        for (int s = 0; s < n; ++s) {
          for (int d = 0; d < n; ++d) at[{s, d}] = s;
        }
        for (const RoutingStep& step : r.steps) {
          const std::map<Block, int> before = at;  // a step's messages run at once
          std::set<Block> moved;
          const auto move = [&](const RoutedTransfer& t, const Block& b) {
            EXPECT_EQ(at[b], t.from) << where(info.algorithm, l);
            EXPECT_TRUE(moved.insert(b).second) << where(info.algorithm, l);
            at[b] = t.to;
          };
          for (const RoutedTransfer& t : step) {
            EXPECT_NE(t.from, t.to) << where(info.algorithm, l);
            for (const Block& b : t.blocks) move(t, b);
            for (const Block& nb : t.node_blocks) {
              EXPECT_EQ(nb, (Block{t.from, t.to})) << where(info.algorithm, l);
              const bool tokens_across =
                  direction == A2ADirection::kDispatch && node(t.from) != node(t.to);
              std::vector<Block> carried;
              for (const auto& [block, member] : before)
                if (member == t.from && block.second != t.from &&
                    (tokens_across ? node(block.second) == node(t.to) : block.second == t.to))
                  carried.push_back(block);
              EXPECT_FALSE(carried.empty()) << where(info.algorithm, l);
              const std::vector<Block> pairs = r.node_block_pairs(nb);  // what executors read
              EXPECT_EQ(std::set<Block>(carried.begin(), carried.end()),
                        std::set<Block>(pairs.begin(), pairs.end()))
                  << where(info.algorithm, l);
              for (const Block& b : carried) move(t, b);
            }
          }
        }
        for (const auto& [block, member] : at)
          EXPECT_EQ(member, block.second) << where(info.algorithm, l);
      }
    }
  }
}

TEST(A2ARouting, NodeBlockPairsNeedANodeBlock) {
  const A2ARouting flat = a2a_routing(Algorithm::kFlat, {0, 1, 2, 3}, 2);
  EXPECT_THROW(flat.node_block_pairs({0, 2}), Error);
  const A2ARouting dedup = a2a_routing(Algorithm::kDedup, {0, 1, 2, 3}, 2);
  EXPECT_THROW(dedup.node_block_pairs({0, 4}), Error);
  EXPECT_EQ(dedup.node_block_pairs({0, 2}), (std::vector<Block>{{0, 2}, {0, 3}}));
  EXPECT_EQ(dedup.node_block_pairs({0, 1}), (std::vector<Block>{{0, 1}}));
  const A2ARouting back =
      a2a_routing(Algorithm::kDedup, {0, 1, 2, 3}, 2, A2ADirection::kCombine);
  EXPECT_EQ(back.node_block_pairs({2, 0}), (std::vector<Block>{{2, 0}, {3, 0}}));
}

TEST(A2ARouting, FlatIsOneDirectStep) {
  const A2ARouting r = a2a_routing(Algorithm::kFlat, {0, 1, 2}, 1);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].size(), 6u);  // every ordered pair of distinct members
  EXPECT_TRUE(r.direct());
  EXPECT_TRUE(a2a_routing(Algorithm::kFlat, {7}, 1).direct());  // nothing to send
}

// NCCL's point-to-point A2A: n-1 rounds, in each one send and one receive per member.
TEST(A2ARouting, PairwiseSendsOnceAndReceivesOncePerStep) {
  const core::RankGroup group = {4, 0, 6, 2, 1};
  const A2ARouting r = a2a_routing(Algorithm::kPairwise, group, 2);
  EXPECT_EQ(r.algorithm, Algorithm::kPairwise);
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_FALSE(r.direct());
  for (size_t k = 0; k < r.steps.size(); ++k) {
    std::vector<int> sends(5), recvs(5);
    for (const RoutedTransfer& t : r.steps[k]) {
      ++sends[t.from];
      ++recvs[t.to];
      EXPECT_EQ(t.to, (t.from + int(k) + 1) % 5);
      EXPECT_EQ(t.blocks, (std::vector<Block>{{t.from, t.to}}));
    }
    EXPECT_EQ(sends, std::vector<int>(5, 1));
    EXPECT_EQ(recvs, std::vector<int>(5, 1));
  }
}

// Tutel's 2DH: an off-node block crosses the network once, between equal local indices.
TEST(A2ARouting, TwoDhCrossesNodesOnceBetweenEqualLocalIndices) {
  const core::RankGroup group = {0, 1, 2, 3, 4, 5};  // 3 nodes of 2
  const A2ARouting r = a2a_routing(Algorithm::k2DH, group, 2);
  ASSERT_EQ(r.steps.size(), 2u);
  std::map<Block, int> crossings;
  for (const RoutingStep& step : r.steps) {
    for (const RoutedTransfer& t : step) {
      const bool across = group[t.from] / 2 != group[t.to] / 2;
      if (across) {
        EXPECT_EQ(t.from % 2, t.to % 2);
      }
      for (const Block& b : t.blocks) crossings[b] += across;
    }
  }
  for (int s = 0; s < 6; ++s) {
    for (int d = 0; d < 6; ++d) {
      const int expected = s / 2 != d / 2 ? 1 : 0;
      EXPECT_EQ(crossings[(Block{s, d})], expected);
    }
  }
  // Step 1 stays inside nodes; step 2 crosses them.
  for (const RoutedTransfer& t : r.steps[0]) EXPECT_EQ(t.from / 2, t.to / 2);
  for (const RoutedTransfer& t : r.steps[1]) EXPECT_NE(t.from / 2, t.to / 2);
}

// HetuMoE's 1DH: only the nodes' first members cross the network.
TEST(A2ARouting, OneDhCrossesOnlyBetweenLeaders) {
  const A2ARouting r = a2a_routing(Algorithm::k1DH, {0, 1, 2, 3, 4, 5, 6, 7}, 4);
  ASSERT_EQ(r.steps.size(), 3u);
  for (const RoutingStep& step : r.steps) {
    for (const RoutedTransfer& t : step) {
      if (t.from / 4 != t.to / 4) {
        EXPECT_EQ(t.from % 4, 0);
        EXPECT_EQ(t.to % 4, 0);
      }
    }
  }
}

TEST(A2ARouting, HierarchiesRunFlatWhereNodesDiffer) {
  for (Algorithm a : {Algorithm::k1DH, Algorithm::k2DH}) {
    for (const Layout& l : {Layout{{0, 1, 2}, 2}, Layout{{0, 1, 2, 3}, 4}, Layout{{0, 2, 3}, 2}}) {
      const A2ARouting r = a2a_routing(a, l.group, l.ranks_per_node);
      EXPECT_EQ(r.algorithm, Algorithm::kFlat) << where(a, l);
      EXPECT_EQ(r.steps, a2a_routing(Algorithm::kFlat, l.group, 1).steps) << where(a, l);
    }
  }
}

TEST(A2ARouting, TransferBytesSumItsBlocks) {
  const RoutedTransfer t{0, 1, {{0, 1}, {2, 1}}};
  const std::vector<double> pairs = {0, 5, 0, 0, 0, 0, 0, 7, 0};  // 3 x 3
  EXPECT_EQ(transfer_bytes(t, pairs, 3), 12);
}

TEST(A2ARouting, CacheReturnsOnePlanPerLayout) {
  const auto a = cached_a2a_routing(Algorithm::k2DH, {0, 1, 2, 3}, 2);
  const auto b = cached_a2a_routing(Algorithm::k2DH, {0, 1, 2, 3}, 2);
  const auto c = cached_a2a_routing(Algorithm::k2DH, {0, 1, 2, 3}, 4);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(a->steps, a2a_routing(Algorithm::k2DH, {0, 1, 2, 3}, 2).steps);
}

TEST(A2ARouting, RefusesWhatIsNotAnA2AAlgorithm) {
  EXPECT_THROW(a2a_routing(Algorithm::kRing, {0, 1}, 1), Error);
  EXPECT_THROW(a2a_routing(Algorithm::kFlat, {0, 1}, 0), Error);
}

// The a2a knob accepts exactly the table's names, and they round-trip.
TEST(A2ARouting, KnobNamesComeFromTheTable) {
  std::vector<std::string> names;
  for (const A2AAlgorithmInfo& info : a2a_algorithms()) {
    names.emplace_back(info.name);
    EXPECT_EQ(parse_a2a_algorithm(std::string(info.name), "test"), info.algorithm);
    EXPECT_EQ(to_string(info.algorithm), info.name);
    EXPECT_TRUE(algorithm_applies(OpKind::kAllToAll, info.algorithm));
  }
  EXPECT_EQ(names, a2a_algorithm_names());
  EXPECT_EQ(names, (std::vector<std::string>{"flat", "1dh", "2dh", "pairwise", "dedup"}));
  EXPECT_EQ(parse_strategy("a2a=pairwise", "test").a2a, Algorithm::kPairwise);
}

}  // namespace
}  // namespace moecomm::sched

#include "core/rank_groups.h"

#include <gtest/gtest.h>

#include <set>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

TEST(RankGroups, TensorParallelIsFastestAndContiguous) {
  ParallelConfig c = resolve_parallel(parse_parallel_spec("tp=4,pp=2", "-"), 16, 8, "-");
  RankGroups g = build_rank_groups(c);
  ASSERT_EQ(g.tp.size(), 4u);
  EXPECT_EQ(g.tp[1], (RankGroup{4, 5, 6, 7}));
  EXPECT_EQ(g.dp[0], (RankGroup{0, 4}));
  EXPECT_EQ(g.pp[0], (RankGroup{0, 8}));
  EXPECT_EQ(g.of("tp", 6), (RankGroup{4, 5, 6, 7}));
}

TEST(RankGroups, ExpertGroupsFoldEspEpEdp) {
  // world 16, esp 2, ep 4 -> edp 2.
  ParallelConfig c = resolve_parallel(parse_parallel_spec("tp=2,esp=2,ep=4", "-"), 16, 8, "-");
  EXPECT_EQ(c.edp, 2);
  RankGroups g = build_rank_groups(c);
  EXPECT_EQ(g.esp[0], (RankGroup{0, 1}));
  EXPECT_EQ(g.ep[0], (RankGroup{0, 2, 4, 6}));
  EXPECT_EQ(g.ep[1], (RankGroup{1, 3, 5, 7}));
  EXPECT_EQ(g.edp[0], (RankGroup{0, 8}));
}

TEST(RankGroups, EveryKindPartitionsTheWorld) {
  ParallelConfig c =
      resolve_parallel(parse_parallel_spec("tp=2,cp=2,pp=2,esp=1,ep=4", "-"), 32, 8, "-");
  RankGroups g = build_rank_groups(c);
  for (const auto* kind : {&g.tp, &g.cp, &g.dp, &g.pp, &g.esp, &g.ep, &g.edp}) {
    std::multiset<int> seen;
    for (const auto& group : *kind) seen.insert(group.begin(), group.end());
    EXPECT_EQ(seen.size(), 32u);
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 32u);
  }
  EXPECT_EQ(g.cp[0], (RankGroup{0, 2}));
}

TEST(RankGroups, Errors) {
  RankGroups g = build_rank_groups(ParallelConfig{});
  EXPECT_ERROR_HAS(g.of("xp", 0), "unknown group kind");
  EXPECT_ERROR_HAS(g.of("tp", 5), "rank 5 is in no tp group");
}

}  // namespace
}  // namespace moecomm::core

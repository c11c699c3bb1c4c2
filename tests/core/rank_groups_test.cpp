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

// MoNTA Fig. 12 on 16 ranks, tp = esp = 2, ep = 2, cp = 2, dp = 4. Vertical (Megatron-Core's
// fold): each CP group is an EP group, the network spans max(ep, cp). Horizontal: cp varies
// after the whole EP group, so CP and EP groups cross (the network spans ep x cp), and DP runs
// along the EP span and the outer blocks.
TEST(RankGroups, CpLayoutAlignsCpWithEpOrCrossesIt) {
  ParallelConfig c = resolve_parallel(parse_parallel_spec("tp=2,cp=2,ep=2", "-"), 16, 2, "-");
  ASSERT_EQ(c.dp, 4);
  RankGroups v = build_rank_groups(c);
  EXPECT_EQ(v.cp[0], (RankGroup{0, 2}));
  EXPECT_EQ(v.ep[0], (RankGroup{0, 2}));
  c.cp_layout = CpLayout::kHorizontal;
  RankGroups h = build_rank_groups(c);
  EXPECT_EQ(h.tp, v.tp);
  EXPECT_EQ(h.ep, v.ep);  // the MoE fold does not move
  EXPECT_EQ(h.cp[0], (RankGroup{0, 4}));
  EXPECT_EQ(h.cp[2], (RankGroup{2, 6}));
  EXPECT_EQ(h.dp[0], (RankGroup{0, 2, 8, 10}));
  EXPECT_EQ(h.dp_cp, v.dp_cp);
  for (const RankGroup& cp : h.cp)  // no two members of a CP group share an EP group
    EXPECT_NE(h.of("ep", cp[0]), h.of("ep", cp[1]));
  for (const auto* kind : {&h.cp, &h.dp, &h.pp}) {
    std::set<int> seen;
    for (const auto& group : *kind) seen.insert(group.begin(), group.end());
    EXPECT_EQ(seen.size(), 16u);
  }
  c.ep = 8;  // an EP group spans 8 TP groups, more than dp = 4 can hold
  EXPECT_ERROR_HAS(build_rank_groups(c), "cp_layout", "horizontal");
}

TEST(RankGroups, Errors) {
  RankGroups g = build_rank_groups(ParallelConfig{});
  EXPECT_ERROR_HAS(g.of("xp", 0), "unknown group kind");
  EXPECT_ERROR_HAS(g.of("tp", 5), "rank 5 is in no tp group");
}

TEST(RankGroups, RanksFormatAsRangesInTheGivenOrder) {
  EXPECT_EQ(format_rank_ranges({0, 1, 2, 3, 4, 5, 6, 7, 32}, ","), "0-7,32");
  EXPECT_EQ(format_rank_ranges({5, 2, 3, 0}, ", "), "5, 2-3, 0");
  EXPECT_EQ(format_rank_ranges({1}, ", "), "1");
  EXPECT_EQ(format_rank_ranges({}, ","), "");
}

}  // namespace
}  // namespace moecomm::core

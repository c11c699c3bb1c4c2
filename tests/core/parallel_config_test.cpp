#include "core/parallel_config.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

TEST(ParallelConfig, ParsesSpec) {
  ParallelSpec s = parse_parallel_spec("dp=2,tp=8,ep=2", "--parallel");
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(s.tp, 8);
  EXPECT_EQ(s.ep, 2);
  EXPECT_FALSE(s.esp.has_value());
}

TEST(ParallelConfig, ResolvesDefaultsMegatronStyle) {
  // 16 ranks, tp = 8: dp = 2; esp defaults to tp; ep fills the rest and divides experts.
  ParallelConfig c = resolve_parallel(parse_parallel_spec("tp=8", "-"), 16, 16, "-");
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.esp, 8);
  EXPECT_EQ(c.ep, 2);
  EXPECT_EQ(c.edp, 1);
  EXPECT_EQ(c.world(), 16);
  // 32 ranks, 8 experts, nothing given: dp = 32, ep = 8, edp = 4.
  c = resolve_parallel({}, 32, 8, "-");
  EXPECT_EQ(c.dp, 32);
  EXPECT_EQ(c.ep, 8);
  EXPECT_EQ(c.edp, 4);
  // ep = 12 would not divide 32: the largest common divisor is taken.
  c = resolve_parallel({}, 32, 12, "-");
  EXPECT_EQ(c.ep, 4);
}

TEST(ParallelConfig, CpLayoutParsesResolvesAndRoundTrips) {
  ParallelSpec s = parse_parallel_spec("tp=2,cp=2,ep=2,cp_layout=horizontal", "--parallel");
  EXPECT_EQ(s.cp_layout, CpLayout::kHorizontal);
  ParallelConfig c = resolve_parallel(s, 16, 2, "-");
  EXPECT_EQ(c.cp_layout, CpLayout::kHorizontal);
  EXPECT_EQ(c.to_json()["cp_layout"], "horizontal");
  EXPECT_EQ(resolve_parallel({}, 16, 2, "-").cp_layout, CpLayout::kVertical);  // the default
  EXPECT_FALSE(resolve_parallel({}, 16, 2, "-").to_json().contains("cp_layout"));
  nlohmann::json j = {{"tp", 2}, {"cp", 2}, {"ep", 2}, {"cp_layout", "horizontal"}};
  EXPECT_EQ(parse_parallel_json(j, "m.json: parallel").cp_layout, CpLayout::kHorizontal);
  j["cp_layout"] = "diagonal";
  EXPECT_ERROR_HAS(parse_parallel_json(j, "m.json: parallel"), "m.json: parallel.cp_layout",
                   "vertical or horizontal");
  EXPECT_ERROR_HAS(parse_parallel_spec("cp_layout=up", "--parallel"), "--parallel: cp_layout",
                   "vertical or horizontal");
  EXPECT_ERROR_HAS(parse_parallel_spec("cp_layout=vertical,cp_layout=vertical", "--parallel"),
                   "--parallel: cp_layout", "twice");
  // 8 ranks, tp = 2, ep = 4 (esp = 2): an EP group spans 4 TP groups, dp = 2 cannot hold them.
  EXPECT_ERROR_HAS(
      resolve_parallel(parse_parallel_spec("tp=2,cp=2,ep=4,cp_layout=horizontal", "-"), 8, 4, "w"),
      "w: cp_layout", "must divide dp");
}

TEST(ParallelConfig, SpecErrors) {
  EXPECT_ERROR_HAS(parse_parallel_spec("dp=2,xp=4", "--parallel"), "--parallel: xp", "unknown key");
  EXPECT_ERROR_HAS(parse_parallel_spec("dp=two", "--parallel"), "--parallel: dp",
                   "must be an integer");
  EXPECT_ERROR_HAS(parse_parallel_spec("dp=2x", "--parallel"), "--parallel: dp",
                   "must be an integer");
  EXPECT_ERROR_HAS(parse_parallel_spec("tp=0", "--parallel"), "--parallel: tp", "at least 1");
  EXPECT_ERROR_HAS(parse_parallel_spec("tp", "--parallel"), "--parallel", "key=value");
  EXPECT_ERROR_HAS(parse_parallel_spec("tp=2,tp=4", "--parallel"), "--parallel: tp", "twice");
  EXPECT_ERROR_HAS(parse_parallel_spec("tp=2000000", "--parallel"), "--parallel: tp", "too large");
  EXPECT_ERROR_HAS(parse_parallel_spec("tp=99999999999", "--parallel"), "--parallel: tp",
                   "must be an integer");
}

TEST(ParallelConfig, EmptyItemsAreRefused) {
  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_parallel_spec(",", "--parallel"); }),
            "--parallel: item 1 of \",\" is empty (separate items by single commas, none at "
            "either end)");
  EXPECT_EQ(error_of([] { parse_parallel_spec("tp=2,,ep=4", "--parallel"); }),
            "--parallel: item 2 of \"tp=2,,ep=4\" is empty (separate items by single commas, "
            "none at either end)");
  EXPECT_EQ(error_of([] { parse_parallel_spec("tp=2,", "--parallel"); }),
            "--parallel: item 2 of \"tp=2,\" is empty (separate items by single commas, none at "
            "either end)");
  // "" gives nothing: every size is derived.
  const ParallelSpec none = parse_parallel_spec("", "--parallel");
  EXPECT_FALSE(none.dp || none.tp || none.ep || none.esp || none.pp || none.cp || none.cp_layout);
}

TEST(ParallelConfig, NearMissKeysGetASuggestion) {
  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_parallel_spec("tp=2,eps=4", "--parallel"); }),
            "--parallel: eps: unknown key; did you mean 'ep' or 'esp'? (keys: dp, tp, ep, esp, "
            "pp, cp, cp_layout)");
  EXPECT_EQ(error_of([] { parse_parallel_spec("cp_layuot=vertical", "--parallel"); }),
            "--parallel: cp_layuot: unknown key; did you mean 'cp_layout'? (keys: dp, tp, ep, "
            "esp, pp, cp, cp_layout)");
  EXPECT_EQ(error_of([] { parse_parallel_spec("cp_layout=horizonal", "--parallel"); }),
            "--parallel: cp_layout: must be vertical or horizontal, got \"horizonal\"; did you "
            "mean 'horizontal'?");
}

TEST(ParallelConfig, SizesMustFoldTheWorldAndDivideTheExperts) {
  auto spec = [](const char* s) { return parse_parallel_spec(s, "--parallel"); };
  EXPECT_ERROR_HAS(resolve_parallel(spec("tp=3"), 16, 8, "--parallel"), "world 16",
                   "tp x cp x pp = 3 does not divide 16");
  EXPECT_ERROR_HAS(resolve_parallel(spec("tp=2,dp=4"), 16, 8, "--parallel"),
                   "tp x cp x dp x pp = 8 must equal the world size");
  EXPECT_ERROR_HAS(resolve_parallel(spec("ep=3"), 12, 8, "--parallel"), "--parallel: ep",
                   "ep = 3 does not divide the number of experts (8)");
  EXPECT_ERROR_HAS(resolve_parallel(spec("ep=16,esp=2"), 16, 16, "--parallel"),
                   "esp x ep x pp = 32 does not divide 16");
  EXPECT_ERROR_HAS(resolve_parallel(spec("esp=3"), 16, 16, "--parallel"),
                   "esp x pp = 3 does not divide 16");
  // Products that would overflow 32 bits are still caught, not wrapped.
  EXPECT_ERROR_HAS(resolve_parallel(spec("tp=65536,cp=65536"), 16, 16, "--parallel"),
                   "tp x cp x pp = 4294967296 does not divide 16");
}

}  // namespace
}  // namespace moecomm::core

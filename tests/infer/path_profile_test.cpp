#include "infer/path_profile.h"

#include <gtest/gtest.h>

#include "infer/trace_builder.h"
#include "support/expect_error.h"

namespace moecomm::infer {
namespace {

using testing::make_trace;
using testing::top1_trace;

// Five tokens over three layers (top-1), experts 0..2.
place::RoutingTrace small_trace() {
  return top1_trace(3, {{0, 1, 2}, {0, 1, 2}, {0, 1, 0}, {1, 1, 1}, {2, 0, 0}});
}

void expect_distribution(const Distribution& d, const std::vector<std::pair<int, double>>& want) {
  ASSERT_EQ(d.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(d[j].expert, want[j].first) << "entry " << j;
    EXPECT_NEAR(d[j].share, want[j].second, 1e-12) << "entry " << j;
  }
}

TEST(PathProfile, FullPathGivesItsNextLayerDistribution) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<int32_t> path{0, 1};
  const auto found = profile.lookup(1, path);
  EXPECT_EQ(found.matched_length, 2);
  expect_distribution(*found.next, {{2, 2.0 / 3}, {0, 1.0 / 3}});
  const std::vector<int32_t> one{2};
  expect_distribution(profile.next_distribution(0, one), {{0, 1.0}});
}

TEST(PathProfile, UnseenPathFallsBackToItsSuffixThenToTheMarginal) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<int32_t> unseen{2, 1};  // (2, 1) never occurs; (1) at layer 1 does
  const auto suffix = profile.lookup(1, unseen);
  EXPECT_EQ(suffix.matched_length, 1);
  expect_distribution(*suffix.next, {{2, 0.5}, {0, 0.25}, {1, 0.25}});
  const std::vector<int32_t> never{0, 2};  // no token was at expert 2 in layer 1
  const auto marginal = profile.lookup(1, never);
  EXPECT_EQ(marginal.matched_length, 0);
  expect_distribution(*marginal.next, {{0, 0.4}, {2, 0.4}, {1, 0.2}});
  expect_distribution(profile.marginal(2), {{0, 0.4}, {2, 0.4}, {1, 0.2}});
}

TEST(PathProfile, RarePathsBelowMinTokensAreIgnored) {
  const PathProfile profile(small_trace(), 2, /*min_tokens=*/2);
  const std::vector<int32_t> rare{1, 1};  // one token only
  const auto found = profile.lookup(1, rare);
  EXPECT_EQ(found.matched_length, 1);
  expect_distribution(*found.next, {{2, 0.5}, {0, 0.25}, {1, 0.25}});
}

TEST(PathProfile, ShorterPathsNearTheFirstLayer) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<int32_t> first{0};
  const auto found = profile.lookup(0, first);
  EXPECT_EQ(found.matched_length, 1);
  expect_distribution(*found.next, {{1, 1.0}});
}

TEST(PathProfile, TopKChoicesAreSharesOfTokenSlots) {
  // Two tokens, top-2: paths use the first choice; Psi counts both choices.
  const auto trace = make_trace(4, {{{{0, 3}, {0, 2}}}, {{{1, 2}, {1, 3}}}});
  const PathProfile profile(trace, 1);
  const std::vector<int32_t> path{0};
  expect_distribution(profile.next_distribution(0, path), {{1, 0.5}, {2, 0.25}, {3, 0.25}});
}

TEST(PathProfile, RejectsBadInput) {
  const auto trace = small_trace();
  EXPECT_ERROR_HAS(PathProfile(trace, 0), "path_length", "[1, layers - 1 = 2]", "got 0");
  EXPECT_ERROR_HAS(PathProfile(trace, 3), "path_length", "got 3");
  EXPECT_ERROR_HAS(PathProfile(trace, 1, 0), "min_tokens");
  EXPECT_ERROR_HAS(PathProfile(top1_trace(3, {{0}}), 1), "at least 2");
  auto bad = small_trace();
  bad.iterations[0][1].at(0, 2, 0) = 7;
  EXPECT_ERROR_HAS(PathProfile(bad, 1), "expert id 7", "[0, 3)");

  const PathProfile profile(trace, 2);
  const std::vector<int32_t> ok{0}, too_long{0, 1, 2}, bad_id{0, 5}, none;
  EXPECT_ERROR_HAS(profile.lookup(2, ok), "layer", "got 2");
  EXPECT_ERROR_HAS(profile.lookup(1, too_long), "path", "has 3 experts");
  EXPECT_ERROR_HAS(profile.lookup(0, std::vector<int32_t>{0, 1}), "path", "1 to 1");
  EXPECT_ERROR_HAS(profile.lookup(1, none), "path", "has 0 experts");
  EXPECT_ERROR_HAS(profile.lookup(1, bad_id), "expert id 5");
  EXPECT_ERROR_HAS(profile.marginal(3), "marginal", "got 3");
}

}  // namespace
}  // namespace moecomm::infer

#include "infer/popularity_estimator.h"

#include <gtest/gtest.h>

#include "infer/trace_builder.h"
#include "support/expect_error.h"

namespace moecomm::infer {
namespace {

using testing::make_trace;
using testing::top1_trace;

place::RoutingTrace small_trace() {
  return top1_trace(3, {{0, 1, 2}, {0, 1, 2}, {0, 1, 0}, {1, 1, 1}, {2, 0, 0}});
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[e], want[e], 1e-12) << "expert " << e;
}

// Paths (0,1) x2, (1,1) and (2,1) -> (1) by fallback; see path_profile_test for their Psi.
TEST(PopularityEstimator, Eq1AveragesTheTopOneOfEachPath) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<std::vector<int32_t>> paths{{0, 1}, {0, 1}, {1, 1}, {2, 1}};
  expect_near(estimate_popularity(profile, 1, paths, 1), {0, 1.0 / 4, (2 * 2.0 / 3 + 0.5) / 4});
}

TEST(PopularityEstimator, TopKKeepsTheKMostLikelyExpertsPerPath) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<std::vector<int32_t>> paths{{0, 1}, {0, 1}, {1, 1}, {2, 1}};
  // (2,1) -> (1): {2: .5, 0: .25, 1: .25}, the tie goes to expert 0.
  expect_near(estimate_popularity(profile, 1, paths, 2),
              {(2 * 1.0 / 3 + 0.25) / 4, 1.0 / 4, (2 * 2.0 / 3 + 0.5) / 4});
}

TEST(PopularityEstimator, TokenPathsReadTheTopOneChoices) {
  const auto trace = make_trace(4, {{{{0, 3}, {2, 1}}, {{3, 0}, {1, 2}}},
                                    {{{1, 2}, {3, 0}}, {{2, 3}, {0, 1}}},
                                    {{{0, 1}, {1, 0}}, {{2, 0}, {3, 1}}}});
  const auto& layers = trace.iterations[0];
  using Paths = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(token_paths(layers, 2, 2, 0, 2), (Paths{{1, 0}, {3, 1}, {2, 2}, {0, 3}}));
  EXPECT_EQ(token_paths(layers, 1, 3, 1, 2), (Paths{{3, 2}, {1, 0}}));  // clipped at layer 0
  EXPECT_EQ(expert_counts(layers[0], 4, 0, 2), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(expert_counts(layers[2], 4, 1, 2), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(PopularityEstimator, TopExpertsOrderAndTies) {
  EXPECT_EQ(top_experts({0.1, 0.3, 0.3, 0.2}, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(top_experts({0.1, 0.3, 0.3, 0.2}, 9), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_TRUE(same_top_experts({0.4, 0.3, 0.2, 0.1}, {0.3, 0.45, 0.1, 0.15}, 2));
  EXPECT_FALSE(same_top_experts({0.4, 0.3, 0.2, 0.1}, {0.3, 0.1, 0.45, 0.15}, 2));
  expect_near(popularity_of_counts({1, 3, 0}), {0.25, 0.75, 0});
  expect_near(popularity_of_counts({0, 0}), {0, 0});
}

TEST(PopularityEstimator, RejectsBadInput) {
  const PathProfile profile(small_trace(), 2);
  const std::vector<std::vector<int32_t>> paths{{0, 1}}, bad_id{{0, 9}}, none;
  EXPECT_ERROR_HAS(estimate_popularity(profile, 1, none, 1), "no tokens");
  EXPECT_ERROR_HAS(estimate_popularity(profile, 1, paths, 0), "top_k", "[1, 3]");
  EXPECT_ERROR_HAS(estimate_popularity(profile, 1, paths, 4), "top_k", "got 4");
  EXPECT_ERROR_HAS(estimate_popularity(profile, 1, bad_id, 1), "expert id 9");
  const auto trace = small_trace();
  const auto& layers = trace.iterations[0];
  EXPECT_ERROR_HAS(token_paths(layers, 3, 1, 0, 1), "layer", "got 3");
  EXPECT_ERROR_HAS(token_paths(layers, 1, 0, 0, 1), "path_length");
  EXPECT_ERROR_HAS(token_paths(layers, 1, 1, 0, 2), "samples", "[0, 2)");
  EXPECT_ERROR_HAS(expert_counts(layers[0], 2, 0, 1), "expert id 2");
  EXPECT_ERROR_HAS(popularity_of_counts({1, -1}), "negative");
  EXPECT_ERROR_HAS(same_top_experts({0.5}, {0.5, 0.5}, 1), "1 experts", "actual 2");
}

}  // namespace
}  // namespace moecomm::infer

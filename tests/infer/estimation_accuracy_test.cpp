#include "infer/estimation_accuracy.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "infer/trace_builder.h"
#include "place/synthetic_routing.h"
#include "support/expect_error.h"

namespace moecomm::infer {
namespace {

// Profile and test iterations come from one generation, so they share the synthetic
// model's expert ranks and layer-to-layer maps (drawn once from the seed).
struct Split {
  place::RoutingTrace profile, test;
};

Split correlated_traces(double locality, double correlation, int profile_iterations) {
  place::SyntheticRoutingSpec spec;
  spec.experts = 16;  // Lina Table 5: 16 experts, k = 1 in inference
  spec.top_k = 1;
  spec.layers = 8;
  spec.samples = 64;
  spec.tokens = 64;
  spec.iterations = profile_iterations + 4;
  spec.locality = locality;
  spec.preferred = 1;
  spec.layer_correlation = correlation;
  spec.seed = 11;
  const auto all = place::generate_routing_trace(spec);
  Split split{all, all};
  split.profile.iterations.resize(profile_iterations);
  split.test.iterations.erase(split.test.iterations.begin(),
                              split.test.iterations.begin() + profile_iterations);
  return split;
}

double accuracy(const Split& split, int path_length) {
  AccuracyOptions options;
  options.batch_samples = 1;  // a 64-token request
  options.first_layer = 2;    // the same layers for every path length (l <= 3)
  return evaluate_estimation(PathProfile(split.profile, path_length), split.test, options)
      .accuracy();
}

// Lina Sec. 7.3.2, Table 5: longer sample paths estimate more accurately. With tokens that
// follow their sample's chain of preferred experts half of the time, a token's earlier
// experts tell whether it follows the chain, which its last expert alone does not.
TEST(EstimationAccuracy, PathLengthThreeBeatsPathLengthOneOnCorrelatedLayers) {
  const Split split = correlated_traces(0.5, 0.9, 16);
  const double l1 = accuracy(split, 1), l3 = accuracy(split, 3);
  std::printf("estimation accuracy (top-2 identical), 16 experts: l=1 %.3f, l=3 %.3f\n", l1, l3);
  ::testing::Test::RecordProperty("accuracy_l1", std::to_string(l1));
  ::testing::Test::RecordProperty("accuracy_l3", std::to_string(l3));
  EXPECT_GE(l3, l1);
  EXPECT_GT(l3, l1 + 0.1);  // measured: 0.43 -> 0.56 on this seed
}

// Without layer-to-layer correlation a path says little about the next layer: whatever the
// path length, most estimates miss (measured: l=1 0.13, l=3 0.23, against 0.56 above).
TEST(EstimationAccuracy, WithoutLayerCorrelationEstimatesMostlyMiss) {
  const Split split = correlated_traces(0.5, 0.0, 8);
  const double l1 = accuracy(split, 1), l3 = accuracy(split, 3);
  std::printf("estimation accuracy without correlation: l=1 %.3f, l=3 %.3f\n", l1, l3);
  EXPECT_LT(l3, 0.3);
  EXPECT_LT(l1, 0.3);
}

TEST(EstimationAccuracy, ExactOnADeterministicChain) {
  // Every token goes e -> e+1 -> e+2: each path predicts its next expert exactly.
  const auto trace = testing::top1_trace(4, {{0, 1, 2}, {0, 1, 2}, {1, 2, 3}, {3, 0, 1}});
  AccuracyOptions options;
  options.first_layer = 0;
  const auto acc = evaluate_estimation(PathProfile(trace, 1), trace, options);
  EXPECT_EQ(acc.estimates, 2);
  EXPECT_EQ(acc.accurate, 2);
  EXPECT_DOUBLE_EQ(acc.accuracy(), 1.0);
}

TEST(EstimationAccuracy, RejectsBadInput) {
  const auto trace = testing::top1_trace(4, {{0, 1, 2}, {1, 2, 3}});
  const PathProfile profile(trace, 2);
  auto other = trace;
  other.experts = 5;
  EXPECT_ERROR_HAS(evaluate_estimation(profile, other, {}), "5 experts", "the profile 4");
  EXPECT_ERROR_HAS(evaluate_estimation(profile, trace, {0, -1, 0}), "batch_samples");
  EXPECT_ERROR_HAS(evaluate_estimation(profile, trace, {1, -1, 5}), "top_k", "got 5");
  EXPECT_ERROR_HAS(evaluate_estimation(profile, trace, {1, 2, 0}), "first_layer", "got 2");
}

}  // namespace
}  // namespace moecomm::infer

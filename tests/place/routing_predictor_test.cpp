#include "place/routing_predictor.h"

#include <gtest/gtest.h>

#include <random>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

// Samples whose tokens at expert e always go on to expert (e + 1) mod E.
void shifted_layers(std::mt19937_64& rng, int samples, int experts, RoutingCounts& now,
                    RoutingCounts& next) {
  now = RoutingCounts(samples, experts);
  next = RoutingCounts(samples, experts);
  for (int i = 0; i < samples; ++i) {
    for (int t = 0; t < 16; ++t) {
      const int e = static_cast<int>(rng() % 2) + 2 * (i % (experts / 2));
      ++now.at(i, e);
      ++next.at(i, (e + 1) % experts);
    }
  }
}

TEST(RoutingPredictor, PredictsNothingBeforeAnyObservation) {
  RoutingPredictor predictor(3, 4);
  RoutingCounts now(2, 4);
  now.num = {1, 2, 3, 4, 0, 0, 5, 5};
  EXPECT_FALSE(predictor.has_statistics(0));
  EXPECT_EQ(predictor.predict(0, now).total(), 0);
}

// When a sample's next experts are a fixed function of its current ones, the statistic
// learns the function and the prediction for new samples is exact.
TEST(RoutingPredictor, LearnsADeterministicLayerToLayerMap) {
  std::mt19937_64 rng(1);
  RoutingPredictor predictor(2, 8, 0.5);
  RoutingCounts now, next;
  shifted_layers(rng, 32, 8, now, next);
  predictor.observe(0, now, next);
  // Tokens of one sample sit on two experts; the co-routing statistic maps each sample's
  // pair {2m, 2m+1} onto {2m+1, 2m+2} in proportion, so a sample's prediction is exact
  // when both its experts carry equal shares.
  RoutingCounts fresh(1, 8), truth(1, 8);
  fresh.at(0, 2) = 8;
  fresh.at(0, 3) = 8;
  truth.at(0, 3) = 8;
  truth.at(0, 4) = 8;
  const RoutingCounts predicted = predictor.predict(0, fresh);
  EXPECT_TRUE(predictor.has_statistics(0));
  EXPECT_LT(prediction_error(predicted, truth), 0.6);
  EXPECT_EQ(predicted.at(0, 0) + predicted.at(0, 6) + predicted.at(0, 7), 0);
  EXPECT_NEAR(static_cast<double>(predicted.total()), 16.0, 1.0);
}

TEST(RoutingPredictor, PredictionErrorIsRelativeL1) {
  RoutingCounts a(1, 3), b(1, 3);
  a.num = {2, 0, 2};
  b.num = {1, 1, 2};
  EXPECT_DOUBLE_EQ(prediction_error(a, b), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(prediction_error(b, b), 0.0);
}

TEST(RoutingPredictor, RejectsBadUse) {
  EXPECT_ERROR_HAS(RoutingPredictor(2, 4, 1.0), "decay must be in [0, 1)");
  RoutingPredictor predictor(2, 4);
  EXPECT_ERROR_HAS(predictor.predict(5, RoutingCounts(1, 4)), "layer 5 outside [0, 2)");
  EXPECT_ERROR_HAS(predictor.predict(0, RoutingCounts(1, 3)), "3 experts, expected 4");
  EXPECT_ERROR_HAS(predictor.observe(0, RoutingCounts(1, 4), RoutingCounts(2, 4)),
                   "different sample counts");
}

// Its cost is cubic in the experts and its statistics quadratic: sizes past the limits are
// refused before anything is allocated, naming the limit and what to reduce.
TEST(RoutingPredictor, RefusesSizesPastItsLimits) {
  EXPECT_ERROR_HAS(RoutingPredictor(2, kMaxPredictorExperts + 1),
                   std::to_string(kMaxPredictorExperts + 1) + " experts",
                   "more than the " + std::to_string(kMaxPredictorExperts), "reduce the experts");
  EXPECT_ERROR_HAS(RoutingPredictor(2, 1'000'000), "1000000 experts", "reduce the experts");
  EXPECT_ERROR_HAS(RoutingPredictor(1000, 1024), "1000 layers x 1024 experts", "MB",
                   "reduce the experts");
  EXPECT_ERROR_HAS(check_predictor_size(12, 1024, 1000), "1000 updates of 1024 experts", "Gflop",
                   "reduce the experts, the layers or the iterations");
  EXPECT_NO_THROW(check_predictor_size(12, 64, 1000));
  EXPECT_NO_THROW(RoutingPredictor(2, 256));
}

}  // namespace
}  // namespace moecomm::place

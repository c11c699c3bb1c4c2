// Order statistics of measured times: exact values on small samples.
#include "core/statistics.h"

#include <gtest/gtest.h>

namespace moecomm::core {
namespace {

TEST(Statistics, QuantileInterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.0), 1);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 1.0), 4);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({10, 20, 30, 40, 50}, 0.95), 48);  // at 3.8: 40 + 0.8 x 10
  EXPECT_DOUBLE_EQ(quantile({}, 0.5), 0);
}

TEST(Statistics, MedianIsTheMiddleOrTheMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({5, 1, 3, 7}), 4);
  EXPECT_DOUBLE_EQ(median({2}), 2);
}

}  // namespace
}  // namespace moecomm::core

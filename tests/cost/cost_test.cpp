#include <gtest/gtest.h>

#include <random>

#include "cost/alpha_beta.h"
#include "cost/efficiency_curve.h"
#include "cost/gemm_model.h"
#include "cost/least_squares.h"
#include "support/expect_error.h"

namespace moecomm::cost {
namespace {

TEST(AlphaBeta, TimeChunkAndInverse) {
  AlphaBeta ab{1e-3, 2e-9};
  EXPECT_DOUBLE_EQ(ab.time(1e6), 1e-3 + 2e-3);
  EXPECT_DOUBLE_EQ(ab.chunk_time(1e6, 4), 1e-3 + 0.5e-3);
  EXPECT_DOUBLE_EQ(ab.inverse(ab.time(5e5)), 5e5);
  EXPECT_DOUBLE_EQ(ab.inverse(0.5e-3), 0.0);  // less than the start-up: nothing fits
}

TEST(EfficiencyCurve, PiecewiseLinearAndClamped) {
  EfficiencyCurve c({{32e6, 0.6}, {8e6, 0.4}, {256e6, 0.8}});
  EXPECT_DOUBLE_EQ(c.at(1e6), 0.4);  // clamped below
  EXPECT_DOUBLE_EQ(c.at(8e6), 0.4);
  EXPECT_DOUBLE_EQ(c.at(20e6), 0.5);   // halfway between 8 and 32 MB
  EXPECT_DOUBLE_EQ(c.at(144e6), 0.7);  // halfway between 32 and 256 MB
  EXPECT_DOUBLE_EQ(c.at(1e12), 0.8);   // clamped above
  EXPECT_DOUBLE_EQ(EfficiencyCurve().at(5), 1.0);
}

TEST(EfficiencyCurve, Errors) {
  EXPECT_ERROR_HAS(EfficiencyCurve({{0, 0.5}}, "curve"), "curve[0]", "size must be positive");
  EXPECT_ERROR_HAS(EfficiencyCurve({{1, 1.5}}, "curve"), "curve[0]", "(0, 1]");
  EXPECT_ERROR_HAS(EfficiencyCurve({{1, 0.5}, {1, 0.6}}, "curve"), "curve[1]", "duplicate");
}

TEST(LeastSquares, RecoversAnExactLine) {
  std::vector<std::pair<double, double>> s;
  for (int i = 1; i <= 24; ++i) s.push_back({i * 262144.0, 2.87e-4 + i * 262144.0 * 2.21e-10});
  LineFit f = fit_alpha_beta(s);
  EXPECT_NEAR(f.line.alpha, 2.87e-4, 1e-12);
  EXPECT_NEAR(f.line.beta, 2.21e-10, 1e-18);
  EXPECT_NEAR(f.r_squared, 1.0, 1e-12);
}

TEST(LeastSquares, NoisyLineMatchesNormalEquations) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 1e-5);
  std::vector<std::pair<double, double>> s;
  for (int i = 1; i <= 50; ++i)
    s.push_back({i * 1e5, 1e-4 + i * 1e5 * 3e-10 + std::abs(noise(rng))});
  LineFit f = fit_alpha_beta(s);
  // Residuals of a least-squares line sum to zero and are orthogonal to x.
  double sum = 0, dot = 0;
  for (auto [x, y] : s) {
    sum += y - f.line.time(x);
    dot += (y - f.line.time(x)) * x;
  }
  EXPECT_NEAR(sum, 0, 1e-12);
  EXPECT_NEAR(dot / 1e5, 0, 1e-10);
  EXPECT_GT(f.r_squared, 0.9);
  EXPECT_LT(f.r_squared, 1.0);
}

TEST(LeastSquares, Errors) {
  EXPECT_ERROR_HAS(fit_alpha_beta({{1, 1}}), "at least two samples");
  EXPECT_ERROR_HAS(fit_alpha_beta({{1, 1}, {1, 2}}), "two distinct sizes");
  EXPECT_ERROR_HAS(fit_alpha_beta({{1, 1}, {2, -1}}), "samples[1]", "finite and >= 0");
}

TEST(GemmModel, FlopsAndTime) {
  EXPECT_DOUBLE_EQ(gemm_flops(2, 3, 4), 48);
  GemmModel peak = GemmModel::from_peak(100, 0.5);  // 50 Tflop/s achieved
  EXPECT_DOUBLE_EQ(peak.time(1000, 1000, 1000), 2e9 / 50e12);
  GemmModel fitted(AlphaBeta{4.26e-5, 2.29e-14});  // FSMoE Fig. 5(a), in seconds
  EXPECT_DOUBLE_EQ(fitted.time_flops(1e9), 4.26e-5 + 2.29e-5);
  EXPECT_ERROR_HAS(GemmModel::from_peak(0), "tflops must be positive");
  EXPECT_ERROR_HAS(GemmModel::from_peak(10, 0), "efficiency must be in (0, 1]");
}

}  // namespace
}  // namespace moecomm::cost

#include "nn/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nn/bf16.h"
#include "nn/gemm.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

TEST(Tensor, ShapeRowsAndSlices) {
  Tensor t({3, 2, 2}, 1.0f);
  EXPECT_EQ(t.size(), 12);
  EXPECT_EQ(t.rows(), 3);
  EXPECT_EQ(t.cols(), 4);
  for (int64_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i);
  Tensor mid = t.slice_rows(1, 1);
  EXPECT_EQ(mid.shape(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(mid[0], 4.0f);
  Tensor z({1, 2, 2});
  t.set_rows(2, z);
  EXPECT_EQ(t.at(2, 3), 0.0f);
  EXPECT_EQ(t.at(1, 3), 7.0f);
  t.reshape({6, 2});
  EXPECT_EQ(t.at(2, 0), 4.0f);
}

TEST(Tensor, BadShapesAreErrors) {
  EXPECT_ERROR_HAS(Tensor({2, 2}, std::vector<float>(3)), "tensor", "4", "3");
  EXPECT_ERROR_HAS(Tensor({-1}), "dimensions must be >= 0");
  Tensor t({2, 3});
  EXPECT_ERROR_HAS(t.reshape({4, 2}), "reshape");
  EXPECT_ERROR_HAS(t.slice_rows(1, 2), "out of range");
  EXPECT_ERROR_HAS(t.add(Tensor({3})), "sizes differ");
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(from_bf16(0x3f80), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Just above a tie rounds up.
  EXPECT_EQ(from_bf16(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(from_bf16(to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::signbit(from_bf16(to_bf16(-0.0f))));
}

TEST(Bf16, RoundTripOfABuffer) {
  Tensor t = Tensor::randn({64, 8}, 7, 3.0f);
  std::vector<uint16_t> wire = to_bf16(t);
  Tensor back(t.shape());
  from_bf16(wire, back);
  for (int64_t i = 0; i < t.size(); ++i) {
    EXPECT_LE(std::fabs(back[i] - t[i]), std::ldexp(std::fabs(t[i]), -8)) << i;
    EXPECT_EQ(to_bf16(back[i]), wire[static_cast<size_t>(i)]);  // bf16 values are exact
  }
  Tensor r = t;
  round_through_bf16(r);
  EXPECT_EQ(max_abs_diff(r, back), 0.0f);
  Tensor wrong({3});
  EXPECT_ERROR_HAS(from_bf16(wire, wrong), "sizes differ");
}

Tensor naive(Trans ta, Trans tb, float alpha, const Tensor& a, const Tensor& b, float beta,
             const Tensor& c0) {
  Tensor c = c0;
  const int64_t m = c.rows(), n = c.cols();
  const int64_t k = ta == Trans::kNo ? a.cols() : a.rows();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = ta == Trans::kNo ? a.at(i, p) : a.at(p, i);
        const float bv = tb == Trans::kNo ? b.at(p, j) : b.at(j, p);
        s += static_cast<double>(av) * bv;
      }
      c.at(i, j) = static_cast<float>(alpha * s + beta * c0.at(i, j));
    }
  return c;
}

TEST(Gemm, MatchesNaiveLoopForAllTransposes) {
  const int64_t m = 5, k = 7, n = 3;
  for (Trans ta : {Trans::kNo, Trans::kYes})
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      Tensor a = ta == Trans::kNo ? Tensor::randn({m, k}, 1) : Tensor::randn({k, m}, 1);
      Tensor b = tb == Trans::kNo ? Tensor::randn({k, n}, 2) : Tensor::randn({n, k}, 2);
      Tensor c = Tensor::randn({m, n}, 3);
      const Tensor want = naive(ta, tb, 0.5f, a, b, 2.0f, c);
      gemm(ta, tb, 0.5f, a, b, 2.0f, c);
      EXPECT_LE(max_abs_diff(c, want), 1e-5f);
    }
  Tensor a = Tensor::randn({4, 6}, 4), b = Tensor::randn({6, 2}, 5);
  EXPECT_LE(max_abs_diff(matmul(a, b), naive(Trans::kNo, Trans::kNo, 1, a, b, 0, Tensor({4, 2}))),
            1e-5f);
}

TEST(Gemm, EmptyInnerDimensionAndMismatches) {
  Tensor a({3, 0}), b({0, 2});
  Tensor c({3, 2}, 4.0f);
  gemm(Trans::kNo, Trans::kNo, 1.0f, a, b, 0.5f, c);
  EXPECT_EQ(c[0], 2.0f);
  Tensor bad({2, 2});
  EXPECT_ERROR_HAS(gemm(Trans::kNo, Trans::kNo, 1.0f, Tensor({3, 4}), Tensor({5, 2}), 0.0f, bad),
                   "gemm", "do not match");
}

}  // namespace
}  // namespace moecomm::nn

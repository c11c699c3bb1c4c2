#include "nn/sr_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of fp32

struct Entries {
  std::vector<float> values;
  std::vector<int32_t> index;
};

// Reads the documented layout: k fp32 values, then k int32 indices.
Entries unpack(const std::vector<std::byte>& enc) {
  const size_t k = enc.size() / 8;
  Entries e{std::vector<float>(k), std::vector<int32_t>(k)};
  std::memcpy(e.values.data(), enc.data(), 4 * k);
  std::memcpy(e.index.data(), enc.data() + 4 * k, 4 * k);
  return e;
}

void set_index(std::vector<std::byte>& enc, size_t j, int32_t idx) {
  std::memcpy(enc.data() + enc.size() / 2 + 4 * j, &idx, 4);
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float res(const std::vector<float>& w, const std::vector<float>& s, size_t i) {
  return s.empty() ? w[i] : w[i] - s[i];
}

// Brute force: all entries sorted by |r| descending, index ascending; the first k, by index.
std::vector<int32_t> brute_top_k(const std::vector<float>& w, const std::vector<float>& s,
                                 int64_t k) {
  std::vector<int32_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float ra = std::fabs(res(w, s, a)), rb = std::fabs(res(w, s, b));
    return ra != rb ? ra > rb : a < b;
  });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

// Normal values, or (ties) multiples of 0.25 in [-2, 2]: many equal |r|, all exact.
std::vector<float> random_vec(std::mt19937& rng, size_t n, bool ties) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> step(-8, 8);
  std::vector<float> v(n);
  for (float& x : v) x = ties ? 0.25f * static_cast<float>(step(rng)) : normal(rng);
  return v;
}

// Rounding bound of s + fl(w - s) against w (see sr_codec.h), in double.
double round_bound(float w, float s) {
  return kU * (std::fabs(double(w) - double(s)) + std::fabs(double(w))) * (1 + kU);
}

TEST(SrCodec, KeptCounts) {
  EXPECT_EQ(sr_kept(1000, 0.02), 10);
  EXPECT_EQ(sr_kept(1'000'000, 0.02), 10'000);  // HybridEP "50x"
  EXPECT_EQ(sr_kept(1, 0.02), 1);               // at least one entry
  EXPECT_EQ(sr_kept(99, 0.02), 1);              // floor(0.99) = 0, clamped up
  EXPECT_EQ(sr_kept(1000, 1.0), 500);           // 8 bytes an entry: half fit the dense size
  EXPECT_EQ(sr_kept(1001, 1.0), 500);
  EXPECT_EQ(sr_kept(1, 1.0), 1);
  EXPECT_EQ(sr_kept(100, 0.58), 29);  // 0.58 * 100 / 2 = 28.999999999999996 in binary
  EXPECT_EQ(sr_kept(std::numeric_limits<int32_t>::max(), 1.0), 1'073'741'823);
  EXPECT_EQ(sr_encoded_bytes(10), 80);
  EXPECT_ERROR_HAS(sr_kept(1000, 0.0), "sr_kept", "compression", "(0, 1]");
  EXPECT_ERROR_HAS(sr_kept(1000, 1.5), "compression", "1.5");
  EXPECT_ERROR_HAS(sr_kept(1000, -0.1), "compression");
  EXPECT_ERROR_HAS(sr_kept(1000, std::nan("")), "compression");
  EXPECT_ERROR_HAS(sr_kept(0, 0.02), "numel", "got 0");
  EXPECT_ERROR_HAS(sr_kept(int64_t{1} << 31, 0.02), "numel", "2147483648");
  EXPECT_ERROR_HAS(sr_encoded_bytes(0), "sr_encoded_bytes", "k");
}

TEST(SrCodec, EncodeKeepsTopKLikeBruteForce) {
  std::mt19937 rng(7);
  for (size_t n : {1, 2, 7, 100, 1000, 4097}) {
    for (bool ties : {false, true}) {
      for (bool with_shared : {true, false}) {
        const std::vector<float> w = random_vec(rng, n, ties);
        const std::vector<float> s = with_shared ? random_vec(rng, n, ties) : std::vector<float>{};
        const auto nn = static_cast<int64_t>(n);
        for (int64_t k : {int64_t{1}, nn / 3, nn / 2, nn - 1, nn}) {
          if (k < 1) continue;
          SCOPED_TRACE(::testing::Message()
                       << "n=" << n << " ties=" << ties << " shared=" << with_shared << " k=" << k);
          const std::vector<std::byte> enc = sr_encode(w, s, k);
          ASSERT_EQ(static_cast<int64_t>(enc.size()), sr_encoded_bytes(k));
          const Entries e = unpack(enc);
          EXPECT_EQ(e.index, brute_top_k(w, s, k));
          for (size_t j = 0; j < e.index.size(); ++j)
            EXPECT_EQ(bits(e.values[j]), bits(res(w, s, static_cast<size_t>(e.index[j]))));
          // The span overload writes the same bytes; encoding is deterministic.
          std::vector<std::byte> again(enc.size());
          sr_encode(w, s, k, again);
          EXPECT_EQ(again, enc);
        }
      }
    }
  }
}

TEST(SrCodec, TiesGoToTheLowerIndex) {
  const std::vector<float> w = {1, -3, 2, 3, -3, 0, 3};
  const Entries e = unpack(sr_encode(w, {}, 3));
  EXPECT_EQ(e.index, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(e.values, (std::vector<float>{-3, 3, -3}));
  const std::vector<float> same(1000, 0.5f), zero(1000, 0.0f);  // one |r| for all
  EXPECT_EQ(unpack(sr_encode(same, zero, 3)).index, (std::vector<int32_t>{0, 1, 2}));
}

TEST(SrCodec, NanResidualsRankAboveInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w = {1, inf, std::nanf(""), -5, 2};
  const Entries e = unpack(sr_encode(w, {}, 2));
  EXPECT_EQ(e.index, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(std::isnan(e.values[1]));
}

TEST(SrCodec, RoundTripWithAllEntriesKept) {
  std::mt19937 rng(11);
  const size_t n = 5000;
  std::vector<float> w = random_vec(rng, n, false);
  w[3] = -0.0f;
  w[4] = std::numeric_limits<float>::denorm_min();
  std::vector<float> out(n);

  // w/o S: the values themselves travel, so decoding is bit-exact (signed zeros included).
  sr_decode(sr_encode(w, {}, n), {}, out);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits(out[i]), bits(w[i])) << i;

  // With S, s + fl(w - s) rounds twice and is not always w: it is within the bound below.
  const std::vector<float> s = random_vec(rng, n, false);
  sr_decode(sr_encode(w, s, n), s, out);
  for (size_t i = 0; i < n; ++i)
    EXPECT_LE(std::fabs(double(out[i]) - double(w[i])), round_bound(w[i], s[i])) << i;
  // ... and it can be off: 1 + fl(1e-30 - 1) = 1 + (-1) = 0.
  const std::vector<float> w1 = {1e-30f}, s1 = {1.0f};
  std::vector<float> out1(1);
  sr_decode(sr_encode(w1, s1, 1), s1, out1);
  EXPECT_EQ(out1[0], 0.0f);

  // Where s/2 <= w <= 2s (Sterbenz), w - s is exact and so is s + (w - s).
  std::uniform_real_distribution<float> ratio(0.5f, 2.0f);
  std::vector<float> ws(n);
  for (size_t i = 0; i < n; ++i) ws[i] = s[i] * ratio(rng);
  sr_decode(sr_encode(ws, s, n), s, out);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits(out[i]), bits(ws[i])) << i;
}

TEST(SrCodec, ErrorIsExactlyTheDroppedResidual) {
  std::mt19937 rng(3);
  for (bool with_shared : {true, false}) {
    const size_t n = 3000;
    const int64_t k = sr_kept(static_cast<int64_t>(n), 0.1);
    ASSERT_EQ(k, 150);
    const std::vector<float> w = random_vec(rng, n, false);
    const std::vector<float> s = with_shared ? random_vec(rng, n, false) : std::vector<float>{};
    std::vector<float> out(n);
    sr_decode(sr_encode(w, s, k), s, out);

    const std::vector<int32_t> kept = brute_top_k(w, s, k);
    std::vector<bool> is_kept(n, false);
    for (int32_t i : kept) is_kept[static_cast<size_t>(i)] = true;
    double dropped_sq = 0, kept_sq = 0, kept_bound_sq = 0;
    for (size_t i = 0; i < n; ++i) {
      const float err = out[i] - w[i];
      if (is_kept[i]) {
        const double b = with_shared ? round_bound(w[i], s[i]) : 0.0;
        EXPECT_LE(std::fabs(double(out[i]) - double(w[i])), b) << i;
        kept_sq += double(err) * err;
        kept_bound_sq += b * b;
      } else {
        // out = s (or 0) here, and fl(s - w) = -fl(w - s): exactly the dropped residual.
        EXPECT_EQ(err, -res(w, s, i)) << i;
        dropped_sq += double(err) * err;
      }
    }
    // Any k-sparse residual leaves at least the n - k smallest r^2: the brute-force minimum.
    std::vector<double> sq(n);
    for (size_t i = 0; i < n; ++i) sq[i] = double(res(w, s, i)) * res(w, s, i);
    std::sort(sq.begin(), sq.end());
    const double min_sq = std::accumulate(sq.begin(), sq.end() - k, 0.0);
    EXPECT_NEAR(dropped_sq, min_sq, 1e-12 * min_sq);
    EXPECT_LE(kept_sq, kept_bound_sq);
  }
}

// Experts = dense common part + sparse specific part (HybridEP Fig. 9a): the residual against
// their average has at most experts * m nonzeros, so k = experts * m loses only rounding,
// while without S the same k drops almost all of the dense part (what Fig. 14 relies on).
TEST(SrCodec, SharedExpertBeatsWithoutSharedOnSparseDifferences) {
  const size_t n = 4096, experts = 8, m = 16;
  const int64_t k = sr_kept(static_cast<int64_t>(n), 0.0625);
  ASSERT_EQ(k, static_cast<int64_t>(experts * m));
  std::mt19937 rng(5);
  const std::vector<float> base = random_vec(rng, n, false);
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<float> mag(4.0f, 8.0f);
  std::vector<std::vector<float>> w(experts, base);
  for (size_t e = 0; e < experts; ++e)  // disjoint supports
    for (size_t j = 0; j < m; ++j) w[e][perm[e * m + j]] += (j % 2 ? -1.0f : 1.0f) * mag(rng);
  std::vector<float> shared(n);  // the average; exactly base off the supports
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (size_t e = 0; e < experts; ++e) sum += w[e][i];
    shared[i] = static_cast<float>(sum / experts);
  }

  std::vector<float> out(n);
  for (size_t e = 0; e < experts; ++e) {
    SCOPED_TRACE(e);
    sr_decode(sr_encode(w[e], shared, k), shared, out);
    double err_s = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = double(out[i]) - w[e][i];
      EXPECT_LE(std::fabs(d), round_bound(w[e][i], shared[i])) << i;
      err_s += d * d;
    }
    sr_decode(sr_encode(w[e], {}, k), {}, out);
    double err_plain = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = double(out[i]) - w[e][i];
      err_plain += d * d;
    }
    // w/o S keeps the m spikes and the largest k - m base values; the rest of the dense base
    // (about n - k values of unit variance) is lost.
    EXPECT_GT(err_plain, 0.5 * static_cast<double>(n - k));
    EXPECT_LT(err_s, 1e-9 * err_plain);
  }
}

TEST(SrCodec, BadSizesAndCorruptBuffersAreErrors) {
  std::mt19937 rng(9);
  const size_t n = 64;
  const std::vector<float> w = random_vec(rng, n, false), s = random_vec(rng, n, false);
  const std::vector<float> short_s(n - 1);
  const std::vector<std::byte> enc = sr_encode(w, s, 8);
  std::vector<float> out(n, 42.0f);

  EXPECT_ERROR_HAS(sr_encode(w, short_s, 8), "sr_encode", "shared has 63", "weights has 64");
  EXPECT_ERROR_HAS(sr_encode(w, s, 0), "sr_encode", "k must be in [1, 64]", "got 0");
  EXPECT_ERROR_HAS(sr_encode(w, s, 65), "k must be in [1, 64]", "got 65");
  EXPECT_ERROR_HAS(sr_encode(std::vector<float>{}, {}, 1), "weights", "got 0");
  std::vector<std::byte> small(63);
  EXPECT_ERROR_HAS(sr_encode(w, s, 8, small), "encoded buffer has 63 bytes", "needs 64");

  EXPECT_ERROR_HAS(sr_decode(enc, short_s, out), "sr_decode", "shared has 63", "out has 64");
  EXPECT_ERROR_HAS(sr_decode(std::vector<std::byte>(enc.begin(), enc.end() - 1), s, out),
                   "63 bytes", "multiple of 8");
  EXPECT_ERROR_HAS(sr_decode(std::vector<std::byte>{}, s, out), "0 bytes");
  std::vector<float> tiny(4);
  EXPECT_ERROR_HAS(sr_decode(enc, {}, tiny), "holds 8 entries", "out has only 4");

  const std::vector<int32_t> idx = unpack(enc).index;
  auto bad = enc;
  set_index(bad, 7, static_cast<int32_t>(n));
  EXPECT_ERROR_HAS(sr_decode(bad, s, out), "index 64 of entry 7", "out of range [0, 64)");
  bad = enc;
  set_index(bad, 0, -1);
  EXPECT_ERROR_HAS(sr_decode(bad, s, out), "index -1 of entry 0", "out of range");
  bad = enc;
  set_index(bad, 2, idx[3]);
  set_index(bad, 3, idx[2]);
  EXPECT_ERROR_HAS(sr_decode(bad, s, out), "not strictly increasing at entry 3");
  bad = enc;
  set_index(bad, 5, idx[4]);
  EXPECT_ERROR_HAS(sr_decode(bad, s, out), "not strictly increasing at entry 5");
  // Validation comes first: a rejected buffer leaves `out` untouched.
  EXPECT_EQ(out, std::vector<float>(n, 42.0f));
}

}  // namespace
}  // namespace moecomm::nn

#include "nn/sr_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "core/error.h"

namespace moecomm::nn {

namespace {

constexpr int64_t kMaxNumel = std::numeric_limits<int32_t>::max();

// |x| as its bit pattern without the sign: monotone in |x| for numbers, NaN above inf. A total
// order, so nth_element stays well defined on NaN residuals.
inline uint32_t abs_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b & 0x7fffffffu;
}

void check_encode_args(std::span<const float> weights, std::span<const float> shared, int64_t k) {
  const auto n = static_cast<int64_t>(weights.size());
  if (n < 1 || n > kMaxNumel)
    throw Error("sr_encode", "weights must hold [1, 2^31 - 1] values, got " + std::to_string(n));
  if (!shared.empty() && shared.size() != weights.size())
    throw Error("sr_encode", "shared has " + std::to_string(shared.size()) +
                                 " values but weights has " + std::to_string(n));
  if (k < 1 || k > n)
    throw Error("sr_encode",
                "k must be in [1, " + std::to_string(n) + "], got " + std::to_string(k));
}

// Sec. IV-B encode: residual, then top-k. Finds t, the k-th largest |r|; the k kept are all
// |r| > t plus the lowest-index |r| == t, collected by one final scan in increasing index order
// (no sort of the kept entries, no tie-dependent output). t comes from a histogram of the top
// 15 bits of |r| (one pass, no n-sized buffer), then std::nth_element among the entries of
// the bucket holding the k-th (O(n) even when all |r| share one bucket).
template <bool kShared>
void encode_top_k(std::span<const float> w, std::span<const float> s, int64_t k,
                  std::span<std::byte> encoded) {
  const size_t n = w.size();
  auto r = [&](size_t i) { return kShared ? w[i] - s[i] : w[i]; };
  std::vector<uint32_t> hist(size_t{1} << 15, 0);  // n <= INT32_MAX
  for (size_t i = 0; i < n; ++i) ++hist[abs_bits(r(i)) >> 16];
  int64_t above = 0;  // entries in buckets above b
  uint32_t b = static_cast<uint32_t>(hist.size() - 1);
  while (above + hist[b] < k) above += hist[b--];  // stops by b = 0: the total is n >= k

  std::vector<uint32_t> bucket;
  bucket.reserve(static_cast<size_t>(hist[b]));
  for (size_t i = 0; i < n; ++i)
    if (const uint32_t a = abs_bits(r(i)); a >> 16 == b) bucket.push_back(a);
  const auto kth = bucket.begin() + (k - above - 1);
  std::nth_element(bucket.begin(), kth, bucket.end(), std::greater<>());
  const uint32_t t = *kth;
  above += std::count_if(bucket.begin(), kth, [t](uint32_t a) { return a > t; });
  int64_t ties_left = k - above;  // >= 1: the k-th itself

  std::byte* values = encoded.data();
  std::byte* index = encoded.data() + 4 * k;
  int64_t j = 0;
  for (size_t i = 0; i < n && j < k; ++i) {
    const float x = r(i);
    const uint32_t a = abs_bits(x);
    if (a > t || (a == t && ties_left-- > 0)) {
      const auto idx = static_cast<int32_t>(i);
      std::memcpy(values + 4 * j, &x, 4);
      std::memcpy(index + 4 * j, &idx, 4);
      ++j;
    }
  }
}

}  // namespace

int64_t sr_kept(int64_t numel, double compression) {
  if (!(compression > 0.0 && compression <= 1.0))  // also rejects NaN
    throw Error("sr_kept", "compression must be in (0, 1], got " + std::to_string(compression));
  if (numel < 1 || numel > kMaxNumel)
    throw Error("sr_kept",
                "numel must be in [1, 2^31 - 1] (int32 indices), got " + std::to_string(numel));
  // A 1e-12 relative slack keeps decimal knobs whole: 0.58 * 100 / 2 is 28.999999999999996
  // in binary, but 0.58 of 400 bytes holds 29 entries.
  const double x = compression * static_cast<double>(numel) / 2.0;
  const auto k = static_cast<int64_t>(std::floor(x * (1.0 + 1e-12)));
  return std::clamp<int64_t>(k, 1, numel);
}

int64_t sr_encoded_bytes(int64_t k) {
  if (k < 1 || k > kMaxNumel)
    throw Error("sr_encoded_bytes", "k must be in [1, 2^31 - 1], got " + std::to_string(k));
  return 8 * k;
}

void sr_encode(std::span<const float> weights, std::span<const float> shared, int64_t k,
               std::span<std::byte> encoded) {
  check_encode_args(weights, shared, k);
  if (static_cast<int64_t>(encoded.size()) != 8 * k)
    throw Error("sr_encode", "encoded buffer has " + std::to_string(encoded.size()) +
                                 " bytes, k = " + std::to_string(k) + " needs " +
                                 std::to_string(8 * k));

  if (shared.empty())
    encode_top_k<false>(weights, shared, k, encoded);
  else
    encode_top_k<true>(weights, shared, k, encoded);
}

std::vector<std::byte> sr_encode(std::span<const float> weights, std::span<const float> shared,
                                 int64_t k) {
  check_encode_args(weights, shared, k);
  std::vector<std::byte> encoded(static_cast<size_t>(sr_encoded_bytes(k)));
  sr_encode(weights, shared, k, encoded);
  return encoded;
}

void sr_decode(std::span<const std::byte> encoded, std::span<const float> shared,
               std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
  if (!shared.empty() && shared.size() != out.size())
    throw Error("sr_decode", "shared has " + std::to_string(shared.size()) +
                                 " values but out has " + std::to_string(n));
  const auto bytes = static_cast<int64_t>(encoded.size());
  if (bytes == 0 || bytes % 8 != 0)
    throw Error("sr_decode", "encoded buffer has " + std::to_string(bytes) +
                                 " bytes, not a positive multiple of 8");
  const int64_t k = bytes / 8;
  if (k > n)
    throw Error("sr_decode", "encoded buffer holds " + std::to_string(k) +
                                 " entries but out has only " + std::to_string(n) + " values");
  const std::byte* values = encoded.data();
  const std::byte* index = encoded.data() + 4 * k;
  auto index_at = [index](int64_t j) {
    int32_t idx;
    std::memcpy(&idx, index + 4 * j, 4);
    return static_cast<int64_t>(idx);
  };

  // Validate every index before touching `out` (a corrupt buffer leaves it unchanged).
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t idx = index_at(j);
    if (idx < 0 || idx >= n)
      throw Error("sr_decode", "index " + std::to_string(idx) + " of entry " + std::to_string(j) +
                                   " is out of range [0, " + std::to_string(n) + ")");
    if (idx <= prev)
      throw Error("sr_decode", "indices not strictly increasing at entry " + std::to_string(j) +
                                   " (" + std::to_string(prev) + " then " + std::to_string(idx) +
                                   ")");
    prev = idx;
  }

  // Sec. IV-B decode, with recovery and addition fused: one pass over `out`.
  int64_t pos = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t idx = index_at(j);
    float r;
    std::memcpy(&r, values + 4 * j, 4);
    if (shared.empty()) {
      std::fill(out.begin() + pos, out.begin() + idx, 0.0f);
      out[static_cast<size_t>(idx)] = r;  // not 0 + r: keeps -0.0, so w/o S is bit-exact
    } else {
      std::copy(shared.begin() + pos, shared.begin() + idx, out.begin() + pos);
      out[static_cast<size_t>(idx)] = shared[static_cast<size_t>(idx)] + r;
    }
    pos = idx + 1;
  }
  if (shared.empty())
    std::fill(out.begin() + pos, out.end(), 0.0f);
  else
    std::copy(shared.begin() + pos, shared.end(), out.begin() + pos);
}

}  // namespace moecomm::nn

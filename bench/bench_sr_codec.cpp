// HybridEP SR codec (Sec. IV-B): encode of a 1M-float expert at compression 0.02 (HybridEP's
// "50x", k = 10485). Ours (nn::sr_encode): a 15-bit histogram of |r|, std::nth_element within
// the bucket of the k-th, one scan. Against the alternatives that select the same k entries:
// std::nth_element over all n |r| then the same scan; or nth_element, partial_sort or a full
// sort of (|r|, index) keys, then the kept indices sorted. Plus the fused decode. Each
// alternative's output is checked against sr_encode's bytes before timing.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "nn/sr_codec.h"

namespace {

using namespace moecomm;

constexpr int64_t kNumel = int64_t{1} << 20;
constexpr double kCompression = 0.02;

struct Expert {
  std::vector<float> w, s;
};

// w = s + r with s, r normal (|r| about 0.1 |s|). ascending: r placed in increasing |r|, the
// order that turns partial_sort's heap filter into O(n log k) (every entry enters the heap).
Expert make_expert(bool ascending) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> r(kNumel);
  for (float& x : r) x = 0.1f * normal(rng);
  if (ascending)
    std::sort(r.begin(), r.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  Expert x{std::vector<float>(kNumel), std::vector<float>(kNumel)};
  for (int64_t i = 0; i < kNumel; ++i) {
    x.s[i] = normal(rng);
    x.w[i] = x.s[i] + r[i];
  }
  return x;
}

const Expert& expert(const benchmark::State& state) {
  static const Expert random = make_expert(false), ascending = make_expert(true);
  return state.range(0) ? ascending : random;
}

uint32_t abs_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b & 0x7fffffffu;
}

// (|r| bits, ~index): larger key = larger |r|, ties to the lower index (sr_encode's order).
std::vector<uint64_t> keys(const Expert& e) {
  std::vector<uint64_t> key(e.w.size());
  for (size_t i = 0; i < key.size(); ++i) {
    key[i] = (uint64_t{abs_bits(e.w[i] - e.s[i])} << 32) | (~static_cast<uint32_t>(i));
  }
  return key;
}

// Writes the top k (key[0, k)) in sr_encode's layout: values then indices, by index.
void write(const Expert& e, const std::vector<uint64_t>& key, int64_t k,
           std::vector<std::byte>& out) {
  std::vector<int32_t> idx(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) idx[j] = static_cast<int32_t>(~static_cast<uint32_t>(key[j]));
  std::sort(idx.begin(), idx.end());
  for (int64_t j = 0; j < k; ++j) {
    const float r = e.w[idx[j]] - e.s[idx[j]];
    std::memcpy(out.data() + 4 * j, &r, 4);
  }
  std::memcpy(out.data() + 4 * k, idx.data(), 4 * k);
}

// nth_element over all n |r| bits for the threshold t, then one scan (ties to lower index).
void encode_threshold(const Expert& e, int64_t k, std::vector<std::byte>& out) {
  std::vector<uint32_t> a(e.w.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = abs_bits(e.w[i] - e.s[i]);
  const auto kth = a.begin() + (k - 1);
  std::nth_element(a.begin(), kth, a.end(), std::greater<>());
  const uint32_t t = *kth;
  int64_t ties_left = k - std::count_if(a.begin(), kth, [t](uint32_t x) { return x > t; });
  int64_t j = 0;
  for (size_t i = 0; i < e.w.size() && j < k; ++i) {
    const float r = e.w[i] - e.s[i];
    const uint32_t b = abs_bits(r);
    if (b > t || (b == t && ties_left-- > 0)) {
      const auto idx = static_cast<int32_t>(i);
      std::memcpy(out.data() + 4 * j, &r, 4);
      std::memcpy(out.data() + 4 * (k + j), &idx, 4);
      ++j;
    }
  }
}

enum class Select { kNthElementAll, kNthElement, kPartialSort, kFullSort };

void encode_alt(const Expert& e, int64_t k, Select how, std::vector<std::byte>& out) {
  if (how == Select::kNthElementAll) return encode_threshold(e, k, out);
  std::vector<uint64_t> key = keys(e);
  switch (how) {
    case Select::kNthElementAll:
    case Select::kNthElement:
      std::nth_element(key.begin(), key.begin() + (k - 1), key.end(), std::greater<>());
      break;
    case Select::kPartialSort:
      std::partial_sort(key.begin(), key.begin() + k, key.end(), std::greater<>());
      break;
    case Select::kFullSort:
      std::sort(key.begin(), key.end(), std::greater<>());
      break;
  }
  write(e, key, k, out);
}

void BM_SrEncode_Ours(benchmark::State& state) {
  const Expert& e = expert(state);
  const int64_t k = nn::sr_kept(kNumel, kCompression);
  std::vector<std::byte> out(static_cast<size_t>(nn::sr_encoded_bytes(k)));
  for (auto _ : state) {
    nn::sr_encode(e.w, e.s, k, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["k"] = static_cast<double>(k);
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}

void BM_SrEncode_Alt(benchmark::State& state, Select how) {
  const Expert& e = expert(state);
  const int64_t k = nn::sr_kept(kNumel, kCompression);
  std::vector<std::byte> out(static_cast<size_t>(nn::sr_encoded_bytes(k)));
  encode_alt(e, k, how, out);
  if (out != nn::sr_encode(e.w, e.s, k)) {
    state.SkipWithError("encoding differs from nn::sr_encode");
    return;
  }
  for (auto _ : state) {
    encode_alt(e, k, how, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["k"] = static_cast<double>(k);
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}

void BM_SrDecode(benchmark::State& state) {
  const Expert& e = expert(state);
  const int64_t k = nn::sr_kept(kNumel, kCompression);
  const std::vector<std::byte> enc = nn::sr_encode(e.w, e.s, k);
  std::vector<float> out(kNumel);
  for (auto _ : state) {
    nn::sr_decode(enc, e.s, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["k"] = static_cast<double>(k);
  state.SetBytesProcessed(state.iterations() * kNumel * 4);
}

// Arg 0: residuals in random order; 1: in ascending |r|.
void args(benchmark::internal::Benchmark* b) {
  b->ArgName("ascending")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_SrEncode_Ours)->Apply(args);
BENCHMARK_CAPTURE(BM_SrEncode_Alt, nth_element_all, Select::kNthElementAll)->Apply(args);
BENCHMARK_CAPTURE(BM_SrEncode_Alt, nth_element_keys, Select::kNthElement)->Apply(args);
BENCHMARK_CAPTURE(BM_SrEncode_Alt, partial_sort, Select::kPartialSort)->Apply(args);
BENCHMARK_CAPTURE(BM_SrEncode_Alt, full_sort, Select::kFullSort)->Apply(args);
BENCHMARK(BM_SrDecode)->Apply(args);

}  // namespace

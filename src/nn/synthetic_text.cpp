#include "nn/synthetic_text.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "core/error.h"

namespace moecomm::nn {
namespace {

uint64_t mix(uint64_t z) {  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double unit(std::mt19937_64& rng) {  // [0, 1), the same on every platform
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

SyntheticText::SyntheticText(SyntheticTextConfig config) : config_(config) {
  const int v = config_.vocab, k = config_.successors, t = config_.topics;
  if (t < 1 || v % t != 0)
    throw Error("synthetic text", "topics must divide the vocabulary " + std::to_string(v) +
                                      ", got " + std::to_string(t));
  const int block = v / t;
  if (v < 2 || k < 1 || k > block)
    throw Error("synthetic text",
                "need vocab >= 2 and 1 <= successors <= vocab / topics, got vocab " +
                    std::to_string(v) + ", successors " + std::to_string(k) + ", topics " +
                    std::to_string(t));
  std::mt19937_64 rng(mix(config_.seed));
  std::vector<int> all(static_cast<size_t>(block));
  for (int i = 0; i < v; ++i) {
    if (i % block == 0) std::iota(all.begin(), all.end(), i);  // the token's topic
    for (int j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct successors
      const int pick = j + static_cast<int>(unit(rng) * (block - j));
      std::swap(all[static_cast<size_t>(j)], all[static_cast<size_t>(pick)]);
    }
    std::vector<double> w(static_cast<size_t>(k));
    for (double& x : w) {
      const double u = 0.05 + unit(rng);
      x = u * u;  // skewed
    }
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    for (double& x : w) x /= sum;
    next_.emplace_back(all.begin(), all.begin() + k);
    prob_.push_back(std::move(w));
  }
}

int SyntheticText::next(int current, double u) const {
  const auto& p = prob_[static_cast<size_t>(current)];
  const auto& n = next_[static_cast<size_t>(current)];
  for (size_t j = 0; j < p.size(); ++j) {
    u -= p[j];
    if (u < 0) return n[j];
  }
  return n.back();
}

double SyntheticText::probability(int i, int j) const {
  const auto& n = next_.at(static_cast<size_t>(i));
  for (size_t a = 0; a < n.size(); ++a)
    if (n[a] == j) return prob_[static_cast<size_t>(i)][a];
  return 0.0;
}

TextBatch SyntheticText::sample(int batch, int seq_len, uint64_t step, int rank) const {
  if (batch <= 0 || seq_len <= 0 || rank < 0)
    throw Error("synthetic text", "batch and seq_len must be positive, rank >= 0");
  TextBatch out{batch, seq_len, {}, {}};
  out.tokens.reserve(static_cast<size_t>(batch) * static_cast<size_t>(seq_len));
  out.targets.reserve(out.tokens.capacity());
  for (int b = 0; b < batch; ++b) {
    // One stream per (seed, step, rank, sequence).
    std::mt19937_64 rng(mix(mix(mix(mix(config_.seed) ^ step) ^ static_cast<uint64_t>(rank)) ^
                            static_cast<uint64_t>(b)));
    int cur = std::min(config_.vocab - 1, static_cast<int>(unit(rng) * config_.vocab));
    for (int s = 0; s < seq_len; ++s) {
      const int nxt = next(cur, unit(rng));
      out.tokens.push_back(cur);
      out.targets.push_back(nxt);
      cur = nxt;
    }
  }
  return out;
}

double SyntheticText::entropy_floor(int seq_len) const {
  if (seq_len <= 0) throw Error("synthetic text", "seq_len must be positive");
  const size_t v = static_cast<size_t>(config_.vocab);
  std::vector<double> h(v, 0.0);
  for (size_t i = 0; i < v; ++i)
    for (double p : prob_[i]) h[i] -= p > 0 ? p * std::log(p) : 0.0;
  std::vector<double> dist(v, 1.0 / static_cast<double>(v));
  double total = 0.0;
  for (int s = 0; s < seq_len; ++s) {
    std::vector<double> nd(v, 0.0);
    for (size_t i = 0; i < v; ++i) {
      total += dist[i] * h[i];
      for (size_t a = 0; a < next_[i].size(); ++a)
        nd[static_cast<size_t>(next_[i][a])] += dist[i] * prob_[i][a];
    }
    dist = std::move(nd);
  }
  return total / seq_len;
}

}  // namespace moecomm::nn

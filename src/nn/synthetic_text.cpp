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

int draw_token(std::mt19937_64& rng, int vocab) {
  return std::min(vocab - 1, static_cast<int>(unit(rng) * vocab));
}

// One row of the chain: k distinct successors from `all` (a partial Fisher-Yates that leaves
// `all` permuted) and their skewed probabilities, appended to next and prob.
void draw_row(std::mt19937_64& rng, std::vector<int>& all, int k, std::vector<int>& next,
              std::vector<double>& prob) {
  const int block = static_cast<int>(all.size());
  for (int j = 0; j < k; ++j) {
    const int pick = j + static_cast<int>(unit(rng) * (block - j));
    std::swap(all[static_cast<size_t>(j)], all[static_cast<size_t>(pick)]);
  }
  std::vector<double> w(static_cast<size_t>(k));
  for (double& x : w) {
    const double u = 0.05 + unit(rng);
    x = u * u;  // skewed
  }
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) prob.push_back(x / sum);
  next.insert(next.end(), all.begin(), all.begin() + k);
}

double entropy(const std::vector<double>& p) {
  double h = 0.0;
  for (double x : p) h -= x > 0 ? x * std::log(x) : 0.0;
  return h;
}

constexpr uint64_t kOrder2Stream = 0x6f72646572320000ull;  // "order2": the pair table's draws

}  // namespace

SyntheticText::SyntheticText(SyntheticTextConfig config) : config_(config) {
  const int v = config_.vocab, k = config_.successors, t = config_.topics;
  if (config_.order != 1 && config_.order != 2)
    throw Error("synthetic text", "order must be 1 or 2, got " + std::to_string(config_.order));
  if (t < 1 || v % t != 0)
    throw Error("synthetic text", "topics must divide the vocabulary " + std::to_string(v) +
                                      ", got " + std::to_string(t));
  const int block = v / t;
  if (v < 2 || k < 1 || k > block)
    throw Error("synthetic text",
                "need vocab >= 2 and 1 <= successors <= vocab / topics, got vocab " +
                    std::to_string(v) + ", successors " + std::to_string(k) + ", topics " +
                    std::to_string(t));
  std::vector<int> all(static_cast<size_t>(block));
  if (config_.order == 1) {
    std::mt19937_64 rng(mix(config_.seed));
    for (int i = 0; i < v; ++i) {
      if (i % block == 0) std::iota(all.begin(), all.end(), i);  // the token's topic
      draw_row(rng, all, k, next_, prob_);
    }
    return;
  }
  std::mt19937_64 rng(mix(mix(config_.seed) ^ kOrder2Stream));
  for (int a = 0; a < v; ++a)
    for (int b = 0; b < v; ++b) {  // pair (a, b): successors in b's topic
      std::iota(all.begin(), all.end(), b / block * block);
      draw_row(rng, all, k, next_, prob_);
    }
}

size_t SyntheticText::state(int prev, int cur) const {
  const size_t c = static_cast<size_t>(cur);
  if (config_.order == 1) return c;
  return static_cast<size_t>(prev) * static_cast<size_t>(config_.vocab) + c;
}

size_t SyntheticText::next_state(size_t row, int token) const {
  const size_t v = static_cast<size_t>(config_.vocab), t = static_cast<size_t>(token);
  return config_.order == 1 ? t : row % v * v + t;
}

int SyntheticText::next(size_t row, double u) const {
  const size_t k = static_cast<size_t>(config_.successors), first = row * k;
  for (size_t j = first; j < first + k; ++j) {
    u -= prob_[j];
    if (u < 0) return next_[j];
  }
  return next_[first + k - 1];
}

double SyntheticText::row_probability(size_t row, int token) const {
  const size_t k = static_cast<size_t>(config_.successors);
  for (size_t j = row * k; j < (row + 1) * k; ++j)
    if (next_[j] == token) return prob_[j];
  return 0.0;
}

double SyntheticText::probability(int i, int j) const {
  if (config_.order != 1)
    throw Error("synthetic text", "probability(i, j) is for order 1; order 2 needs the pair");
  return probability(0, i, j);
}

double SyntheticText::probability(int prev, int cur, int next) const {
  const int v = config_.vocab;
  if (cur < 0 || cur >= v || (config_.order == 2 && (prev < 0 || prev >= v)))
    throw Error("synthetic text", "token out of the vocabulary");
  return row_probability(state(prev, cur), next);
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
    int cur = draw_token(rng, config_.vocab);                            // x_0
    int prev = config_.order == 2 ? draw_token(rng, config_.vocab) : 0;  // hidden x_{-1}
    for (int s = 0; s < seq_len; ++s) {
      const int nxt = next(state(prev, cur), unit(rng));
      out.tokens.push_back(cur);
      out.targets.push_back(nxt);
      prev = cur;
      cur = nxt;
    }
  }
  return out;
}

std::vector<double> SyntheticText::row_entropies() const {
  const size_t k = static_cast<size_t>(config_.successors), rows = prob_.size() / k;
  std::vector<double> h(rows, 0.0);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = i * k; j < (i + 1) * k; ++j)
      h[i] -= prob_[j] > 0 ? prob_[j] * std::log(prob_[j]) : 0.0;
  return h;
}

// Order 2 at s = 0: the mean over x_0 = b of H(1/V sum_a row (a, b)).
double SyntheticText::first_step_entropy() const {
  const int v = config_.vocab;
  const size_t k = static_cast<size_t>(config_.successors);
  double total = 0.0;
  for (int b = 0; b < v; ++b) {
    std::vector<double> mixture(static_cast<size_t>(v), 0.0);
    for (int a = 0; a < v; ++a)
      for (size_t j = state(a, b) * k; j < (state(a, b) + 1) * k; ++j)
        mixture[static_cast<size_t>(next_[j])] += prob_[j] / v;
    total += entropy(mixture);
  }
  return total / v;
}

std::vector<double> SyntheticText::propagate(const std::vector<double>& dist) const {
  const size_t k = static_cast<size_t>(config_.successors);
  std::vector<double> nd(dist.size(), 0.0);
  for (size_t i = 0; i < dist.size(); ++i)
    for (size_t j = i * k; j < (i + 1) * k; ++j) nd[next_state(i, next_[j])] += dist[i] * prob_[j];
  return nd;
}

double SyntheticText::entropy_floor(int seq_len) const {
  if (seq_len <= 0) throw Error("synthetic text", "seq_len must be positive");
  const std::vector<double> h = row_entropies();
  std::vector<double> dist(h.size(), 1.0 / static_cast<double>(h.size()));  // s = 0 states
  double total = 0.0;
  int s = 0;
  if (config_.order == 2) {  // (x_{-1}, x_0) uniform, but x_{-1} is hidden from the predictor
    total = first_step_entropy();
    dist = propagate(dist);
    s = 1;
  }
  for (; s < seq_len; ++s) {
    for (size_t i = 0; i < h.size(); ++i) total += dist[i] * h[i];
    dist = propagate(dist);
  }
  return total / seq_len;
}

}  // namespace moecomm::nn

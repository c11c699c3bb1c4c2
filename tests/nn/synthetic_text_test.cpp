// The synthetic text's order knob: order 2 chains (rows per pair, topics, sampling, the exact
// entropy floor against brute-force enumeration, a hand-checked chain and Monte Carlo), and
// order 1 unchanged (values recorded before the knob existed).
#include "nn/synthetic_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

// The floor by definition: enumerate every (x_{-1}, x_0, ..., x_S), x_{-1} and x_0 uniform,
// and average H(x_{s+1} | x_0..x_s) over s. Exponential: tiny chains only.
double brute_force_floor(const SyntheticText& t, int seq_len) {
  const int v = t.vocab(), len = seq_len + 2;  // x_{-1} .. x_S
  std::vector<std::vector<double>> marg;       // marg[m][x_0..x_m, base v]: P(x_0..x_m)
  size_t width = 1;
  for (int m = 0; m <= seq_len; ++m) marg.emplace_back(width *= static_cast<size_t>(v), 0.0);
  size_t paths = 1;
  for (int i = 0; i < len; ++i) paths *= static_cast<size_t>(v);
  std::vector<int> x(static_cast<size_t>(len));
  for (size_t path = 0; path < paths; ++path) {
    for (size_t i = 0, rest = path; i < x.size(); ++i, rest /= static_cast<size_t>(v))
      x[i] = static_cast<int>(rest % static_cast<size_t>(v));
    double p = 1.0 / (v * v);
    for (size_t i = 2; i < x.size(); ++i) p *= t.probability(x[i - 2], x[i - 1], x[i]);
    size_t key = 0;
    for (size_t m = 0; m < marg.size(); ++m) {
      key = key * static_cast<size_t>(v) + static_cast<size_t>(x[m + 1]);
      marg[m][key] += p;
    }
  }
  double total = 0.0;
  for (int s = 0; s < seq_len; ++s) {
    const auto &next = marg[static_cast<size_t>(s + 1)], &known = marg[static_cast<size_t>(s)];
    for (size_t key = 0; key < next.size(); ++key)
      if (next[key] > 0)
        total -= next[key] * std::log(next[key] / known[key / static_cast<size_t>(v)]);
  }
  return total / seq_len;
}

TEST(SyntheticTextOrder, EntropyFloorEqualsBruteForceEnumeration) {
  const SyntheticTextConfig configs[] = {
      {.vocab = 3, .successors = 2, .seed = 4, .order = 2},
      {.vocab = 2, .successors = 2, .seed = 9, .order = 2},
      {.vocab = 4, .successors = 2, .seed = 3, .topics = 2, .order = 2},
      {.vocab = 3, .successors = 2, .seed = 4, .order = 1},
      {.vocab = 4, .successors = 1, .seed = 7, .topics = 2, .order = 1},
  };
  for (const SyntheticTextConfig& c : configs) {
    const SyntheticText t(c);
    for (int s = 1; s <= 4; ++s)
      EXPECT_NEAR(t.entropy_floor(s), brute_force_floor(t, s), 1e-12)
          << "vocab " << c.vocab << " order " << c.order << " seq_len " << s;
  }
}

// Vocab 2, one successor per pair: every step is certain except x_1 when the two pairs
// (0, x_0), (1, x_0) lead to different tokens: ln 2 then, for half the x_0 each.
TEST(SyntheticTextOrder, DeterministicPairsHaveTheHandComputedFloor) {
  int uncertain_chains = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const SyntheticText t({.vocab = 2, .successors = 1, .seed = seed, .order = 2});
    int ambiguous = 0;  // x_0 whose successor depends on the hidden x_{-1}
    for (int b = 0; b < 2; ++b) ambiguous += t.probability(0, b, 0) != t.probability(1, b, 0);
    uncertain_chains += ambiguous > 0;
    for (int s = 1; s <= 5; ++s)
      EXPECT_NEAR(t.entropy_floor(s), std::log(2.0) * ambiguous / 2.0 / s, 1e-14);
  }
  EXPECT_GT(uncertain_chains, 0);
}

// The best predictor's loss on samples (the pair's row; at s = 0 the mixture over x_{-1})
// matches the floor within 5 standard errors of a mean over independent sequences.
void check_monte_carlo(const SyntheticText& t, int seq_len) {
  const int v = t.vocab();
  std::vector<double> per_seq;
  for (uint64_t step = 0; step < 200; ++step) {
    const TextBatch b = t.sample(16, seq_len, step, 2);
    for (int q = 0; q < b.batch; ++q) {
      double loss = 0.0;
      for (int s = 0; s < seq_len; ++s) {
        const size_t at = static_cast<size_t>(q * seq_len + s);
        double p = 0.0;
        if (s == 0)
          for (int a = 0; a < v; ++a) p += t.probability(a, b.tokens[at], b.targets[at]) / v;
        else
          p = t.probability(b.tokens[at - 1], b.tokens[at], b.targets[at]);
        loss -= std::log(p);
      }
      per_seq.push_back(loss / seq_len);
    }
  }
  double mean = 0.0, var = 0.0;
  for (double x : per_seq) mean += x / static_cast<double>(per_seq.size());
  for (double x : per_seq) var += (x - mean) * (x - mean) / static_cast<double>(per_seq.size() - 1);
  const double stderr_of_mean = std::sqrt(var / static_cast<double>(per_seq.size()));
  EXPECT_GT(stderr_of_mean, 0.0);
  EXPECT_NEAR(mean, t.entropy_floor(seq_len), 5.0 * stderr_of_mean);
}

TEST(SyntheticTextOrder, EntropyFloorMatchesMonteCarlo) {
  check_monte_carlo(SyntheticText({.order = 2}), 16);
  check_monte_carlo(
      SyntheticText({.vocab = 64, .successors = 3, .seed = 2, .topics = 16, .order = 2}), 8);
  check_monte_carlo(SyntheticText({.vocab = 8, .successors = 3, .seed = 5, .order = 2}), 3);
}

TEST(SyntheticTextOrder, PairRowsAreDistributionsInsideTheCurrentTokensTopic) {
  const SyntheticText t({.vocab = 16, .successors = 3, .seed = 2, .topics = 4, .order = 2});
  for (int a = 0; a < 16; ++a)
    for (int b = 0; b < 16; ++b) {
      double sum = 0.0;
      int nonzero = 0;
      for (int c = 0; c < 16; ++c) {
        const double p = t.probability(a, b, c);
        sum += p;
        nonzero += p > 0;
        if (p > 0) {
          EXPECT_EQ(c / 4, b / 4) << a << ", " << b << " -> " << c;
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      EXPECT_EQ(nonzero, 3);
    }
  // The rows depend on the previous token, not only the current one.
  int differs = 0;
  for (int b = 0; b < 16; ++b)
    for (int c = 0; c < 16; ++c) differs += t.probability(0, b, c) != t.probability(1, b, c);
  EXPECT_GT(differs, 0);
}

TEST(SyntheticTextOrder, SamplesFollowTheChain) {
  for (int topics : {1, 4}) {
    const SyntheticText t({.vocab = 16, .successors = 3, .seed = 6, .topics = topics, .order = 2});
    const int seq_len = 12;
    const TextBatch b = t.sample(8, seq_len, 5, 1);
    for (int q = 0; q < 8; ++q)
      for (int s = 0; s < seq_len; ++s) {
        const size_t at = static_cast<size_t>(q * seq_len + s);
        if (s + 1 < seq_len) {
          EXPECT_EQ(b.targets[at], b.tokens[at + 1]);
        }
        EXPECT_EQ(b.targets[at] / (16 / topics), b.tokens[at - s] / (16 / topics));
        double p = 0.0;
        if (s == 0)  // some hidden x_{-1} leads there
          for (int a = 0; a < 16; ++a) p += t.probability(a, b.tokens[at], b.targets[at]);
        else
          p = t.probability(b.tokens[at - 1], b.tokens[at], b.targets[at]);
        EXPECT_GT(p, 0.0) << "sequence " << q << " position " << s;
      }
  }
}

TEST(SyntheticTextOrder, SamplesArePureFunctionsOfSeedStepRank) {
  const SyntheticTextConfig c{.vocab = 16, .successors = 3, .seed = 6, .order = 2};
  const SyntheticText t(c), again(c);
  const TextBatch a = t.sample(4, 10, 7, 0);
  EXPECT_EQ(a.tokens, again.sample(4, 10, 7, 0).tokens);
  EXPECT_EQ(a.targets, again.sample(4, 10, 7, 0).targets);
  EXPECT_NE(a.tokens, t.sample(4, 10, 7, 1).tokens);  // another rank
  EXPECT_NE(a.tokens, t.sample(4, 10, 8, 0).tokens);  // another step
  SyntheticTextConfig other = c;
  other.seed = 7;
  EXPECT_NE(a.tokens, SyntheticText(other).sample(4, 10, 7, 0).tokens);
  // Each sequence has its own stream: a smaller batch is a prefix.
  const TextBatch two = t.sample(2, 10, 7, 0);
  EXPECT_TRUE(std::equal(two.tokens.begin(), two.tokens.end(), a.tokens.begin()));
}

// Recorded by running the code before the order knob existed.
TEST(SyntheticTextOrder, OrderOneIsUnchanged) {
  const SyntheticText defaults;
  EXPECT_EQ(defaults.order(), 1);
  const TextBatch a = defaults.sample(2, 8, 3, 1);
  EXPECT_EQ(a.tokens,
            (std::vector<int>{44, 50, 35, 23, 11, 1, 43, 40, 11, 43, 40, 38, 46, 5, 18, 55}));
  EXPECT_EQ(a.targets,
            (std::vector<int>{50, 35, 23, 11, 1, 43, 40, 44, 43, 40, 38, 46, 5, 18, 55, 34}));
  EXPECT_EQ(defaults.entropy_floor(1), 1.0742429605078345);
  EXPECT_EQ(defaults.entropy_floor(16), 1.072598687144579);
  EXPECT_EQ(defaults.probability(0, 36), 0.64107194987731975);
  EXPECT_EQ(defaults.probability(0, 57), 0.091775331349869343);

  const SyntheticText topics({.vocab = 16, .successors = 3, .seed = 5, .topics = 4});
  const TextBatch b = topics.sample(2, 8, 3, 1);
  EXPECT_EQ(b.tokens, (std::vector<int>{7, 5, 4, 6, 6, 6, 6, 6, 4, 7, 5, 4, 7, 6, 5, 4}));
  EXPECT_EQ(b.targets, (std::vector<int>{5, 4, 6, 6, 6, 6, 6, 7, 7, 5, 4, 7, 6, 5, 4, 7}));
  EXPECT_EQ(topics.entropy_floor(1), 0.88527751151139267);
  EXPECT_EQ(topics.entropy_floor(16), 0.83777130391179022);
  EXPECT_EQ(topics.probability(0, 2), 0.52111353096959268);
  EXPECT_EQ(topics.probability(3, 0, 2), 0.52111353096959268);  // order 1 ignores prev
}

TEST(SyntheticTextOrder, BadOrderIsAnError) {
  for (int order : {0, 3, -1})
    EXPECT_ERROR_HAS(SyntheticText({.order = order}), "synthetic text", "order must be 1 or 2");
  const SyntheticText two({.vocab = 4, .successors = 2, .order = 2});
  EXPECT_ERROR_HAS(two.probability(0, 1), "order 2 needs the pair");
  EXPECT_ERROR_HAS(two.probability(4, 0, 1), "out of the vocabulary");
}

}  // namespace
}  // namespace moecomm::nn

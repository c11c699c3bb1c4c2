#pragma once
// The default training data of `moecomm train`: sequences from a fixed random Markov chain
// over a small vocabulary, of order 1 (the next token depends on the current one) or 2 (on
// the previous two). Every state (a token, or a pair (x_{s-1}, x_s) for order 2) has
// `successors` distinct next tokens (sparse transitions) with random skewed probabilities,
// all fixed by the seed. A sequence starts at a uniformly drawn x_0 (order 2: and a hidden,
// uniformly drawn x_{-1}, on which x_1 depends); the targets are the next tokens.
//
// Batches are a pure function of (seed, step, rank, batch, seq_len), so data-parallel ranks
// draw different samples and a run is reproducible.
//
// Entropy floor: the best possible mean cross-entropy of predicting x_{s+1} from x_0..x_s,
// averaged over positions s = 0..S-1 of a sequence. Order 1: x_s decides it,
//   floor(S) = 1/S sum_s sum_i P(x_s = i) H(row i),  P(x_0 = .) uniform, P(x_{s+1}) = P(x_s) T
// Order 2: for s >= 1 the pair (x_{s-1}, x_s) decides it (sum over pairs P(pair) H(row of
// pair), the pair distribution propagated exactly); for s = 0 only x_0 is known, so the term
// is the mean over x_0 of H(the mixture over a uniform x_{-1} of row (x_{-1}, x_0)).
// entropy_floor(S) computes it exactly (nats). With the defaults (64 tokens, 4 successors,
// order 1) it is about 1.1 nats against ln 64 = 4.16 for a uniform guess: a model that
// learns the bigram statistics goes from ~4.2 to near the floor. Order 2 needs a nonlinear
// function of two positions (attention brings x_{s-1} to s; an MLP or expert combines them):
// with the defaults its floor is also about 1.1 nats, but the best bigram predictor scores
// about 3.9.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moecomm::nn {

struct SyntheticTextConfig {
  int vocab = 64;
  int successors = 4;  // next tokens with nonzero probability, per token (<= vocab)
  uint64_t seed = 1;   // the chain and the sample streams
  // The vocabulary in this many equal blocks; a token's successors stay in its block, so a
  // sequence keeps to one topic: the per-sample routing locality that NetMoE's placement
  // exploits (trained MoE models route a topic's tokens to a few experts). 1: no blocks.
  int topics = 1;
  // 1 or 2: the next token depends on the current token (1) or the previous two (2). Order 2
  // draws its own pair table (pair (a, b): successors in b's topic block) from its own stream;
  // order 1's tables and samples are those of the chain before this knob existed.
  int order = 1;
};

struct TextBatch {
  int batch = 0;
  int seq_len = 0;
  std::vector<int> tokens;   // [batch * seq_len], sequence-major
  std::vector<int> targets;  // [batch * seq_len]: the next token of each position
};

class SyntheticText {
 public:
  explicit SyntheticText(SyntheticTextConfig config = {});

  TextBatch sample(int batch, int seq_len, uint64_t step, int rank = 0) const;

  double entropy_floor(int seq_len) const;  // nats per token, see above
  // P(next = j | current = i); order 1 only.
  double probability(int i, int j) const;
  // P(x_{s+1} = next | x_{s-1} = prev, x_s = cur); order 1 ignores prev.
  double probability(int prev, int cur, int next) const;
  int vocab() const { return config_.vocab; }
  int order() const { return config_.order; }

 private:
  size_t state(int prev, int cur) const;  // the row of the chain
  size_t next_state(size_t row, int token) const;
  int next(size_t row, double u) const;  // u in [0, 1)
  double row_probability(size_t row, int token) const;
  std::vector<double> row_entropies() const;
  double first_step_entropy() const;  // order 2, s = 0: x_{-1} unknown
  std::vector<double> propagate(const std::vector<double>& dist) const;  // one step, per row

  SyntheticTextConfig config_;
  // Row r (a token, or the pair (a, b) as a * vocab + b): successors [r k, (r + 1) k).
  std::vector<int> next_;
  std::vector<double> prob_;  // and their probabilities
};

}  // namespace moecomm::nn

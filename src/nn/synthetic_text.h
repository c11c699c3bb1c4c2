#pragma once
// The default training data of `moecomm train`: sequences from a fixed random first-order
// Markov chain over a small vocabulary. Every token has `successors` distinct next tokens
// (sparse transitions) with random skewed probabilities, all fixed by the seed. A sequence
// starts at a uniformly drawn token; the targets are the next tokens.
//
// Batches are a pure function of (seed, step, rank, batch, seq_len), so data-parallel ranks
// draw different samples and a run is reproducible.
//
// Entropy floor: the best possible mean cross-entropy is that of predicting x_{s+1} from x_s
// (the chain is first order), averaged over positions s = 0..S-1 of a sequence:
//   floor(S) = 1/S sum_s sum_i P(x_s = i) H(row i),  P(x_0 = .) uniform, P(x_{s+1}) = P(x_s) T
// entropy_floor(S) computes it exactly (nats). With the defaults (64 tokens, 4 successors) it
// is about 1.1 nats against ln 64 = 4.16 for a uniform guess: a model that learns the bigram
// statistics goes from ~4.2 to near the floor.
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
  // P(next = j | current = i).
  double probability(int i, int j) const;
  int vocab() const { return config_.vocab; }

 private:
  int next(int current, double u) const;  // u in [0, 1)

  SyntheticTextConfig config_;
  std::vector<std::vector<int>> next_;     // per token: its successors
  std::vector<std::vector<double>> prob_;  // and their probabilities
};

}  // namespace moecomm::nn

// The scheduled runtime's baseline, which every equivalence test compares strategies with,
// pinned to the one-process model: nn::MoeTransformer holding all experts (LocalExchange),
// no runtime and no MPI, run by every rank alone on the global batch (every data rank's
// batch). The losses of 3 steps (which take in the Adam updates and each step's batches) and
// the gradients of the first step must agree within 1e-5 relative (fp32), so a bug that every
// strategy shares (a batch drawn twice, a gradient summed instead of averaged, which Adam's
// scale invariance hides from the losses, an expert's gradient missing a rank's tokens) fails.
//
// The gradients are compared at the first step, from the same weights: Adam divides each
// element by its own magnitude, so an element whose gradient is at the rounding level of its
// tensor moves by about +-lr either way, and the order of the sums (the global batch's, or
// each rank's and then the AllReduce) picks the sign. Two exact one-process runs (the global
// batch, and each rank's batch with the gradients averaged) differ by up to 8e-5 relative in
// the third step's expert gradients, while the losses stay within 1e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "nn/adam.h"
#include "nn/local_exchange.h"
#include "nn/moe_transformer.h"
#include "nn/synthetic_text.h"
#include "nn/tensor.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

// The equivalence tests' run (small enough for 8 oversubscribed ranks; dropless, so a token's
// expert output does not depend on which other tokens share its rank).
TrainConfig baseline(int ep, float aux_loss_weight, int steps) {
  TrainConfig c = test::tiny_train(1, "baseline");
  c.model.aux_loss_weight = aux_loss_weight;
  c.ep = ep;
  c.seq_len = 12;
  c.steps = steps;
  c.data_seed = 7;
  return c;
}

struct Reference {
  std::vector<float> loss, lm_loss;         // per step
  std::map<std::string, nn::Tensor> grads;  // the first step's, by name
  std::vector<std::string> dense;           // the dense parameters' names
};

// The one-process training on the same data: data rank r's batch at step s is
// SyntheticText::sample(batch, seq_len, s, r), and the global batch is those of r = 0..R-1
// one after another.
//
// per_rank_aux: the gates' load-balancing loss (GShard's E sum_e f_e m_e, gate_math.h) is not
// a sum over tokens: it is computed on each rank's own tokens (moe_layer.h: routing,
// capacity and the aux loss are per rank), and the reported loss and the averaged gradients
// are the mean over the data ranks of each rank's loss. That is a different objective from
// the aux loss of the global batch, so with the aux loss on, the reference computes it
// explicitly: one forward and backward of the one-process model per data rank's batch, the
// gradients accumulated and scaled by 1 / R, the losses averaged. Without it, the loss is
// the mean cross-entropy over tokens, and one forward of the global batch is the same
// objective (every rank has the same number of tokens).
Reference one_process(const TrainConfig& c, int data_ranks, bool per_rank_aux) {
  nn::LocalExchange local;
  nn::MoeTransformer model(c.model, local);
  nn::Adam adam(model.params(), nn::AdamConfig{.lr = c.lr});
  const nn::SyntheticText text(nn::SyntheticTextConfig{
      .vocab = c.model.vocab, .seed = c.data_seed, .topics = c.topics, .order = c.text_order});
  Reference ref;
  for (int step = 0; step < c.steps; ++step) {
    std::vector<nn::TextBatch> batches;
    for (int r = 0; r < data_ranks; ++r)
      batches.push_back(text.sample(c.batch, c.seq_len, static_cast<uint64_t>(step), r));
    adam.zero_grad();
    float loss = 0, lm_loss = 0;
    if (per_rank_aux) {
      for (const nn::TextBatch& b : batches) {
        loss += model.forward(b.tokens, b.targets, c.seq_len) / float(data_ranks);
        lm_loss += model.lm_loss() / float(data_ranks);
        model.backward();
      }
      nn::scale_grad(model.params(), 1.0f / float(data_ranks));
    } else {
      std::vector<int> tokens, targets;
      for (const nn::TextBatch& b : batches) {
        tokens.insert(tokens.end(), b.tokens.begin(), b.tokens.end());
        targets.insert(targets.end(), b.targets.begin(), b.targets.end());
      }
      loss = model.forward(tokens, targets, c.seq_len);
      lm_loss = model.lm_loss();
      model.backward();
    }
    ref.loss.push_back(loss);
    ref.lm_loss.push_back(lm_loss);
    if (step == 0) {
      for (nn::Param* p : model.params()) ref.grads.emplace(p->name, *p->grad);
      for (nn::Param* p : model.dense_params()) ref.dense.push_back(p->name);
    }
    adam.step();
  }
  return ref;
}

float max_abs(const nn::Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.size(); ++i) m = std::max(m, std::abs(t[i]));
  return m;
}

// The runtime's losses of every step within 1e-5 relative of the reference's.
void expect_losses(const TrainResult& run, const Reference& ref) {
  ASSERT_EQ(run.steps.size(), ref.loss.size());
  for (size_t s = 0; s < ref.loss.size(); ++s) {
    EXPECT_NEAR(run.steps[s].loss, ref.loss[s], 1e-5 * std::abs(ref.loss[s])) << "step " << s + 1;
    EXPECT_NEAR(run.steps[s].lm_loss, ref.lm_loss[s], 1e-5 * std::abs(ref.lm_loss[s]))
        << "step " << s + 1;
  }
}

// A one-step run's gradients (this rank's, after the AllReduces and the scaling) within 1e-5
// of the largest element of each tensor (its small elements sum as many terms, in another
// order, as its large ones).
void expect_gradients(const TrainResult& run, const Reference& ref, const TrainConfig& c) {
  const int me = test::world_rank(), experts = c.model.moe.experts, own = experts / c.ep;
  // This rank holds every dense parameter and the E / ep experts of its EP position.
  const size_t per_expert = (ref.grads.size() - ref.dense.size()) / size_t(experts);
  ASSERT_EQ(run.gradients.size(), ref.dense.size() + per_expert * size_t(own));
  std::vector<std::string> dense;
  for (const auto& [name, grad] : run.gradients) {
    const auto it = ref.grads.find(name);
    ASSERT_NE(it, ref.grads.end()) << "rank " << me << ": " << name << " is not the model's";
    ASSERT_EQ(grad.shape(), it->second.shape()) << name;
    // An expert that no token chose has no gradient, here and there (the bound is then 0).
    const float scale = max_abs(it->second);
    if (name.find(".expert") == std::string::npos) {
      dense.push_back(name);
      EXPECT_GT(scale, 0.0f) << name;
    }
    EXPECT_LE(nn::max_abs_diff(grad, it->second), 1e-5f * scale)
        << "rank " << me << ": " << name << " (largest |gradient| " << scale << ")";
  }
  EXPECT_EQ(dense, ref.dense);
  // The EP group's member p (EP groups are consecutive ranks) holds experts [p own, (p + 1) own).
  const int position = me % c.ep;
  for (const auto& [name, grad] : run.gradients) {
    const auto at = name.find(".expert");
    if (at == std::string::npos) continue;
    const int e = std::stoi(name.substr(at + 7));
    EXPECT_EQ(e / own, position) << name;
  }
}

// Expert parallelism over the whole world, and over halves of it (each expert then held by
// two ranks whose gradients the expert-data-parallel group averages): the cross-entropy
// alone, whose mean over ranks is the global batch's.
TEST(BaselineVsSingleProcess, TrainsAsOneProcessOnTheGlobalBatch) {
  const int world = test::world_size();
  for (int ep : {world, world / 2}) {
    SCOPED_TRACE("ep=" + std::to_string(ep));
    const TrainConfig c = baseline(ep, 0.0f, 3), first = baseline(ep, 0.0f, 1);
    const Reference ref = one_process(c, world, /*per_rank_aux=*/false);
    expect_losses(train(c), ref);
    expect_gradients(train(first), ref, first);
  }
}

// With GShard's aux loss (weight 0.01): the mean over ranks of each rank's loss.
TEST(BaselineVsSingleProcess, AuxLossTrainsAsOneProcessPerRankBatch) {
  const int world = test::world_size();
  for (int ep : {world, world / 2}) {
    SCOPED_TRACE("ep=" + std::to_string(ep));
    const TrainConfig c = baseline(ep, 0.01f, 3), first = baseline(ep, 0.01f, 1);
    const Reference ref = one_process(c, world, /*per_rank_aux=*/true);
    const TrainResult run = train(c);
    expect_losses(run, ref);
    expect_gradients(train(first), ref, first);
    // The aux loss is on: the loss is more than the cross-entropy.
    EXPECT_GT(run.steps.front().loss - run.steps.front().lm_loss, 1e-4f);
  }
}

}  // namespace
}  // namespace moecomm::rt

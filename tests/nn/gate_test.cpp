// Gates: forward semantics and gradients (combine weights and aux loss) against central
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "grad_check.h"
#include "nn/expert_choice_gate.h"
#include "nn/gshard_gate.h"
#include "nn/sigmoid_gate.h"
#include "nn/xmoe_gate.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

using testing::check_gradient;

constexpr float kAuxCoef = 0.7f;

// L = sum_s r_s weight_s + kAuxCoef * aux, checked for x and every gate parameter.
void check_gate_gradients(Gate& gate, Tensor x,
                          testing::GradCheckOptions opt = {2e-3f, 2e-3f, 2e-2f}) {
  GateOutput out = gate.forward(x);
  const Tensor r = Tensor::randn({out.slots()}, 99);
  gate.zero_grad();
  const Tensor dx = gate.backward(r.values(), kAuxCoef);
  std::vector<Tensor> grads;
  for (const Param& p : gate.params()) grads.push_back(*p.grad);
  auto loss = [&] {
    out = gate.forward(x);
    double l = kAuxCoef * static_cast<double>(out.aux_loss);
    for (int s = 0; s < out.slots(); ++s)
      l += static_cast<double>(r[s]) * out.weight[static_cast<size_t>(s)];
    return l;
  };
  auto signature = [&] {
    std::vector<int> sig = out.token;
    sig.insert(sig.end(), out.expert.begin(), out.expert.end());
    return sig;
  };
  const int n = check_gradient("dx", x, dx, loss, signature, opt);
  EXPECT_GT(3 * n, x.size());
  std::vector<Param> params = gate.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const int m = check_gradient(params[i].name, *params[i].value, grads[i], loss, signature, opt);
    EXPECT_GT(3 * m, params[i].value->size()) << params[i].name;
  }
}

TEST(GShardGate, TopTwoWeightsAreNormalisedAndAuxIsSwitchLoss) {
  GShardGate gate({4, 3, 2, true, 0.0f, 5});
  const Tensor x = Tensor::randn({8, 4}, 1);
  const GateOutput out = gate.forward(x);
  ASSERT_EQ(out.slots(), 16);
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(out.token[static_cast<size_t>(2 * t)], t);
    EXPECT_NEAR(out.weight[static_cast<size_t>(2 * t)] + out.weight[static_cast<size_t>(2 * t + 1)],
                1.0f, 1e-6f);
    EXPECT_GE(out.weight[static_cast<size_t>(2 * t)], out.weight[static_cast<size_t>(2 * t + 1)]);
  }
  // Uniform probabilities give aux = E * sum_e f_e / E = 1.
  GShardGate zero({4, 3, 1, true, 0.0f, 5});
  zero.params()[0].value->fill(0.0f);
  EXPECT_NEAR(zero.forward(x).aux_loss, 1.0f, 1e-6f);
}

TEST(GShardGate, NoiseIsSeededAndOnlyMovesTheSelection) {
  const Tensor x = Tensor::randn({32, 4}, 1);
  GShardGate a({4, 4, 1, true, 50.0f, 3}), b({4, 4, 1, true, 50.0f, 3}),
      clean({4, 4, 1, true, 0.0f, 3});
  const GateOutput oa = a.forward(x), ob = b.forward(x), oc = clean.forward(x);
  EXPECT_EQ(oa.expert, ob.expert);
  EXPECT_NE(oa.expert, oc.expert);  // large noise reroutes some tokens
}

TEST(GShardGate, GradientsMatchFiniteDifferences) {
  GShardGate gate({5, 4, 2, true, 0.0f, 11});
  check_gate_gradients(gate, Tensor::randn({6, 5}, 2));
  GShardGate top1({5, 4, 1, true, 0.0f, 12});
  check_gate_gradients(top1, Tensor::randn({6, 5}, 3));
}

TEST(SigmoidGate, WeightsAreSigmoidsAndAuxIsStableMoEBalance) {
  SigmoidGate gate({2, 2, 1, 0});
  Tensor& wg = *gate.params()[0].value;
  wg = Tensor({2, 2}, {1, 0, 0, 1});
  const Tensor x({3, 2}, {2, 0, 1, 0, 0, 3});  // experts 0, 0, 1
  const GateOutput out = gate.forward(x);
  EXPECT_EQ(out.expert, (std::vector<int>{0, 0, 1}));
  auto sg = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  EXPECT_NEAR(out.weight[0], sg(2), 1e-6f);
  EXPECT_NEAR(out.weight[2], sg(3), 1e-6f);
  // n = 1.5: expert 0 has (2 - 1.5) / 1.5, expert 1 (1 - 1.5) / 1.5.
  const float want = (0.5f / 1.5f) * (sg(2) + sg(1)) - (0.5f / 1.5f) * sg(3);
  EXPECT_NEAR(out.aux_loss, want, 1e-6f);
}

TEST(SigmoidGate, GradientsMatchFiniteDifferences) {
  SigmoidGate gate({5, 4, 1, 21});
  check_gate_gradients(gate, Tensor::randn({7, 5}, 4));
  SigmoidGate top2({5, 4, 2, 22});
  check_gate_gradients(top2, Tensor::randn({7, 5}, 5));
}

TEST(XMoEGate, ScoresAreCosinesOverTemperature) {
  XMoEGate gate({3, 2, 1, 2, 0.5f, true, 0});
  *gate.params()[0].value = Tensor({3, 2}, {1, 0, 0, 1, 0, 0});
  *gate.params()[1].value = Tensor({2, 2}, {2, 0, 0, 5});
  // z = (3, 4): cosines 0.6 and 0.8, scores 1.2 and 1.6.
  const GateOutput out = gate.forward(Tensor({1, 3}, {3, 4, 7}));
  EXPECT_EQ(out.expert[0], 1);
  EXPECT_NEAR(out.weight[0], 1.0f / (1.0f + std::exp(-0.4f)), 1e-6f);
}

TEST(XMoEGate, GradientsMatchFiniteDifferences) {
  XMoEGate gate({6, 4, 2, 3, 0.5f, true, 31});
  check_gate_gradients(gate, Tensor::randn({6, 6}, 6), {2e-3f, 2e-3f, 2e-2f});
  XMoEGate top1({6, 4, 1, 3, 0.3f, true, 32});
  check_gate_gradients(top1, Tensor::randn({6, 6}, 7), {2e-3f, 2e-3f, 2e-2f});
}

TEST(ExpertChoiceGate, EachExpertPicksItsTopTokens) {
  ExpertChoiceGate gate({2, 2, 0.8f, 0});
  *gate.params()[0].value = Tensor({2, 2}, {1, 0, 0, 1});
  const Tensor x({5, 2}, {3, 0, 0, 3, 1, 0, 2, 0, 0, 1});
  const GateOutput out = gate.forward(x);
  ASSERT_TRUE(out.expert_choice);
  EXPECT_EQ(out.per_group, 2);  // ceil(0.8 * 5 / 2)
  EXPECT_EQ(out.token, (std::vector<int>{0, 3, 1, 4}));
  EXPECT_EQ(out.expert, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_NEAR(out.weight[0], 1.0f / (1.0f + std::exp(-3.0f)), 1e-6f);
  EXPECT_NEAR(out.weight[3], 1.0f / (1.0f + std::exp(-1.0f)), 1e-6f);
  EXPECT_EQ(out.aux_loss, 0.0f);
}

TEST(ExpertChoiceGate, GradientsMatchFiniteDifferences) {
  ExpertChoiceGate gate({5, 3, 1.5f, 41});
  check_gate_gradients(gate, Tensor::randn({8, 5}, 8, 3.0f), {1e-3f, 2e-3f, 2e-2f});
}

// NetMoE's regrouped aux loss: two "home" batches x0, x1, routed by two gates apart, equal
// one gate routing their rows interleaved with the aux loss grouped by home: aux of each
// home from the all-token statistics, and d x and the parameter gradients of L = aux_0 +
// aux_1 (grad_aux 1, slot weights without gradient).
template <class G, class C>
void check_regrouped_aux(const C& config) {
  constexpr int kTokens = 6, kHidden = 5;
  const Tensor x0 = Tensor::randn({kTokens, kHidden}, 51),
               x1 = Tensor::randn({kTokens, kHidden}, 52);
  G a(config), b(config), mixed(config);
  const float aux0 = a.forward(x0).aux_loss, aux1 = b.forward(x1).aux_loss;
  const Tensor dx0 = a.backward(std::vector<float>(static_cast<size_t>(kTokens * 2), 0.0f), 1.0f);
  const Tensor dx1 = b.backward(std::vector<float>(static_cast<size_t>(kTokens * 2), 0.0f), 1.0f);
  Tensor x({2 * kTokens, kHidden});  // rows alternate: home 0, home 1, ...
  std::vector<int> home;
  for (int t = 0; t < kTokens; ++t) {
    x.set_rows(2 * t, x0.slice_rows(t, 1));
    x.set_rows(2 * t + 1, x1.slice_rows(t, 1));
    home.insert(home.end(), {0, 1});
  }
  const GateOutput out = mixed.forward(x);
  ASSERT_TRUE(mixed.groups_aux());
  const int experts = out.experts;
  std::vector<AuxStats> stats(2, AuxStats(experts));
  mixed.add_aux_stats(home, stats);
  EXPECT_NEAR(mixed.aux_of(stats[0]), aux0, 1e-6f);
  EXPECT_NEAR(mixed.aux_of(stats[1]), aux1, 1e-6f);
  mixed.regroup_aux(home, stats);
  const Tensor dx =
      mixed.backward(std::vector<float>(static_cast<size_t>(out.slots()), 0.0f), 1.0f);
  for (int t = 0; t < kTokens; ++t) {
    EXPECT_LE(max_abs_diff(dx.slice_rows(2 * t, 1), dx0.slice_rows(t, 1)), 1e-6f);
    EXPECT_LE(max_abs_diff(dx.slice_rows(2 * t + 1, 1), dx1.slice_rows(t, 1)), 1e-6f);
  }
  for (size_t i = 0; i < mixed.params().size(); ++i) {
    Tensor want = *a.params()[i].grad;
    want.add(*b.params()[i].grad);
    EXPECT_LE(max_abs_diff(*mixed.params()[i].grad, want), 1e-6f) << mixed.params()[i].name;
  }
  // The regrouping is used by one backward only: the next one is of the forward's own aux.
  const Tensor again =
      mixed.backward(std::vector<float>(static_cast<size_t>(out.slots()), 0.0f), 1.0f);
  EXPECT_GT(max_abs_diff(again, dx), 1e-6f);
}

TEST(Gates, AuxLossRegroupsByHome) {
  check_regrouped_aux<GShardGate>(GShardGateConfig{5, 4, 2, true, 0.0f, 61});
  check_regrouped_aux<XMoEGate>(XMoEGateConfig{5, 4, 2, 3, 0.5f, true, 62});
  check_regrouped_aux<SigmoidGate>(SigmoidGateConfig{5, 4, 2, 63});
}

TEST(Gates, ExpertChoiceAuxDoesNotRegroup) {
  ExpertChoiceGate gate({5, 3, 1.5f, 41});
  EXPECT_FALSE(gate.groups_aux());
  EXPECT_ERROR_HAS(gate.regroup_aux({0}, {AuxStats(3)}), "cannot be regrouped");
}

TEST(Gates, BadConfigurationsAreErrors) {
  EXPECT_ERROR_HAS(GShardGate({4, 2, 3, true, 0, 0}), "gshard gate", "k must be");
  EXPECT_ERROR_HAS(SigmoidGate({0, 2, 1, 0}), "sigmoid gate", "positive");
  EXPECT_ERROR_HAS(XMoEGate({4, 2, 1, 2, 0.0f, true, 0}), "x-moe gate", "temperature");
  EXPECT_ERROR_HAS(ExpertChoiceGate({4, 2, -1.0f, 0}), "expert-choice gate", "capacity_factor");
}

}  // namespace
}  // namespace moecomm::nn

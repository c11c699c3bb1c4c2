// Gates: forward semantics and gradients (combine weights and aux loss) against central
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>

#include "grad_check.h"
#include "nn/expert_choice_gate.h"
#include "nn/gate_math.h"
#include "nn/gshard_gate.h"
#include "nn/moe_layer_factory.h"
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

// Node-limited routing's worked case, the same in python/tests/test_torch_routing.py: 8
// experts in 4 groups of 2, each token among its best 2 groups, top-3, on logits h = x (Wg =
// I). A group's score is the sum of its two softmax probabilities, i.e. of exp(h) per row:
//   token 0: h = (3, -5 | 1, 1 | 2.5, -4 | 0, 0): groups 20.09, 5.44, 12.20, 2: keep 0 and 2,
//            experts 0, 4, 5 (plain top-3: 0, 4, 2).
//   token 1: h = (2, 1.9 | 2.5, -5 | 2.4, -5 | 0, 0): groups 14.08, 12.19, 11.03, 2: keep 0
//            and 1, experts 2, 0, 1 (plain top-3: 2, 4, 0; the best expert of each group, the
//            max, would keep groups 1 and 2).
//   token 2: h = (0, 0.1 | 0.2, 0.3 | 3, 2 | 1, 2.2): groups 2.11, 2.57, 27.47, 11.74: keep 2
//            and 3, experts 4, 7, 5 (= plain top-3).
Tensor node_limited_logits() {
  return Tensor({3, 8}, {3, -5,   1,    1,    2.5f, -4, 0, 0,  //
                         2, 1.9f, 2.5f, -5,   2.4f, -5, 0, 0,  //
                         0, 0.1f, 0.2f, 0.3f, 3,    2,  1, 2.2f});
}

Tensor identity(int n) {
  Tensor i({n, n});
  for (int e = 0; e < n; ++e) i.at(e, e) = 1;
  return i;
}

TEST(GroupLimitedTopK, KeepsTheBestGroupsByTheirTopTwoAffinities) {
  GShardGate gate({8, 8, 3, true, 0.0f, 0, 4, 2});
  *gate.params()[0].value = identity(8);
  const GateOutput out = gate.forward(node_limited_logits());
  EXPECT_EQ(out.expert, (std::vector<int>{0, 4, 5, 2, 0, 1, 4, 7, 5}));
  GShardGate plain({8, 8, 3, true, 0.0f, 0});
  *plain.params()[0].value = identity(8);
  EXPECT_EQ(plain.forward(node_limited_logits()).expert,
            (std::vector<int>{0, 4, 2, 2, 4, 0, 4, 7, 5}));
  // One expert per group: the group's score is that expert's affinity, so the limit to the
  // best groups is plain top-k.
  const Tensor h = node_limited_logits();
  EXPECT_EQ(group_limited_topk_rows(h, softmax_rows(h), 3, 8, 3), topk_rows(h, 3));
}

// The groups a token's experts are in, at most router_group_top_k; the same gate without the
// limit sends some tokens to more (the limit binds).
int most_groups_per_token(const GateOutput& out, int per_group) {
  int most = 0;
  for (int t = 0; t < out.tokens; ++t) {
    std::set<int> groups;
    for (int j = 0; j < out.per_group; ++j)
      groups.insert(out.expert[static_cast<size_t>(t * out.per_group + j)] / per_group);
    most = std::max(most, static_cast<int>(groups.size()));
  }
  return most;
}

TEST(GroupLimitedTopK, NoTokenReachesMoreThanGroupTopKGroups) {
  // 32 experts in 8 groups of 4, top-6: each token within 2 (then 3) groups.
  const Tensor x = Tensor::randn({64, 12}, 71);
  for (GateKind kind : {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE}) {
    MoeLayerSpec spec{.hidden = 12, .ffn_hidden = 8, .experts = 32, .top_k = 6, .gate = kind};
    spec.seed = 5;
    EXPECT_GT(most_groups_per_token(make_gate(spec)->forward(x), 4), 3) << to_string(kind);
    for (int group_top_k : {2, 3}) {
      spec.router_groups = 8;
      spec.router_group_top_k = group_top_k;
      const GateOutput out = make_gate(spec)->forward(x);
      EXPECT_EQ(out.slots(), 64 * 6);
      EXPECT_EQ(most_groups_per_token(out, 4), group_top_k) << to_string(kind);
    }
  }
}

// groups = 1, router_group_top_k = 0 or = groups: every expert stays, the plain gate.
TEST(GroupLimitedTopK, WithoutALimitItIsThePlainGate) {
  const Tensor x = Tensor::randn({40, 12}, 72);
  for (GateKind kind : {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE}) {
    MoeLayerSpec spec{.hidden = 12, .ffn_hidden = 8, .experts = 16, .top_k = 4, .gate = kind};
    spec.seed = 9;
    spec.gate_noise = kind == GateKind::kGShard ? 3.0f : 0.0f;
    const GateOutput plain = make_gate(spec)->forward(x);
    for (auto [groups, group_top_k] : {std::pair{1, 0}, {1, 1}, {4, 0}, {4, 4}, {16, 16}}) {
      spec.router_groups = groups;
      spec.router_group_top_k = group_top_k;
      const GateOutput out = make_gate(spec)->forward(x);
      EXPECT_EQ(out.expert, plain.expert) << to_string(kind) << " " << groups;
      EXPECT_EQ(out.weight, plain.weight) << to_string(kind) << " " << groups;
      EXPECT_EQ(out.aux_loss, plain.aux_loss) << to_string(kind) << " " << groups;
    }
  }
}

// The limit only chooses which experts carry a weight: the gradient flows through the chosen
// experts' weights (and the aux loss) as without it.
TEST(GroupLimitedTopK, GradientsMatchFiniteDifferences) {
  GShardGate gshard({5, 8, 3, true, 0.0f, 81, 4, 2});
  check_gate_gradients(gshard, Tensor::randn({6, 5}, 82));
  SigmoidGate sigmoid({5, 8, 2, 83, 4, 1});
  check_gate_gradients(sigmoid, Tensor::randn({7, 5}, 84));
  XMoEGate xmoe({6, 8, 2, 3, 0.5f, true, 85, 2, 1});
  check_gate_gradients(xmoe, Tensor::randn({6, 6}, 86));
}

TEST(GroupLimitedTopK, BadGroupsAreErrorsNamingTheKey) {
  EXPECT_EQ(::moecomm::testing::error_of([] {
              GShardGate({4, 8, 2, true, 0.0f, 0, 3, 1});
            }),
            "gshard gate: router_groups: router_groups = 3 does not divide experts = 8 (the "
            "groups are equal)");
  EXPECT_ERROR_HAS(SigmoidGate({4, 8, 3, 0, 4, 1}), "sigmoid gate: router_group_top_k",
                   "1 x 2 = 2 is fewer than top_k = 3");
  EXPECT_ERROR_HAS(XMoEGate({4, 8, 1, 2, 0.5f, true, 0, 4, 5}), "x-moe gate: router_group_top_k",
                   "must be in [0, router_groups = 4]");
  MoeLayerSpec spec{.hidden = 4, .ffn_hidden = 8, .experts = 8, .gate = GateKind::kExpertChoice};
  spec.router_groups = 4;
  spec.router_group_top_k = 2;
  EXPECT_ERROR_HAS(make_gate(spec), "expert-choice gate: router_group_top_k",
                   "lets experts choose tokens");
  spec.router_group_top_k = 4;  // no limit: accepted
  EXPECT_NO_THROW(make_gate(spec));
}

TEST(Gates, BadConfigurationsAreErrors) {
  EXPECT_ERROR_HAS(GShardGate({4, 2, 3, true, 0, 0}), "gshard gate", "k must be");
  EXPECT_ERROR_HAS(SigmoidGate({0, 2, 1, 0}), "sigmoid gate", "positive");
  EXPECT_ERROR_HAS(XMoEGate({4, 2, 1, 2, 0.0f, true, 0}), "x-moe gate", "temperature");
  EXPECT_ERROR_HAS(ExpertChoiceGate({4, 2, -1.0f, 0}), "expert-choice gate", "capacity_factor");
}

}  // namespace
}  // namespace moecomm::nn

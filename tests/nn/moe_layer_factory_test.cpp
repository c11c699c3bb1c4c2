// The factory's upcycled experts (MoeLayerSpec::expert_spread): base + spread * own, element by
// element; identical experts at spread 0; today's experts by default; the same experts on every
// EP rank and on every ESP shard (sliced) as in the single-process layer.
#include "nn/moe_layer_factory.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "nn/local_exchange.h"
#include "support/expect_error.h"
#include "threaded_exchange.h"

namespace moecomm::nn {
namespace {

constexpr int kHidden = 4, kFfn = 6, kExperts = 4;

MoeLayerSpec spec_of(core::FfnType kind, float spread, FfnShard shard = {}) {
  MoeLayerSpec s;
  s.hidden = kHidden;
  s.ffn_hidden = kFfn;
  s.experts = kExperts;
  s.ffn_type = kind;
  s.seed = 11;
  s.expert_spread = spread;
  s.expert_shard = shard;
  return s;
}

// name -> value of one expert's parameters.
std::map<std::string, Tensor> weights(Expert& e) {
  std::map<std::string, Tensor> out;
  for (const Param& p : e.params()) out.emplace(p.name, *p.value);
  return out;
}

std::map<std::string, Tensor> expert_weights(const MoeLayerSpec& s, int e) {
  return weights(*make_layer_expert(s, e));
}

// Layer parameters "expert<e>.<name>" -> value.
std::map<std::string, Tensor> layer_expert_weights(MoeLayer& layer) {
  std::map<std::string, Tensor> out;
  for (const Param& p : layer.params())
    if (p.name.rfind("expert", 0) == 0) out.emplace(p.name, *p.value);
  return out;
}

const core::FfnType kKinds[] = {core::FfnType::kGelu, core::FfnType::kSwiglu};

TEST(MoeLayerFactory, DefaultSpreadKeepsTheIndependentExperts) {
  for (core::FfnType kind : kKinds) {
    const MoeLayerSpec s = spec_of(kind, -1.0f);
    EXPECT_LT(MoeLayerSpec{}.expert_spread, 0.0f);
    for (int e = 0; e < kExperts; ++e) {
      const auto want = weights(*make_expert(kind, kHidden, kFfn, expert_seed(s.seed, e)));
      for (const auto& [name, w] : expert_weights(s, e))
        EXPECT_EQ(max_abs_diff(w, want.at(name)), 0.0f) << name;
    }
    LocalExchange local;
    auto layer = make_moe_layer(s, local);
    for (const auto& [name, w] : layer_expert_weights(*layer)) {
      const int e = std::stoi(name.substr(6));
      const std::string local_name = name.substr(name.find('.') + 1);
      EXPECT_EQ(max_abs_diff(w, expert_weights(s, e).at(local_name)), 0.0f) << name;
    }
  }
}

TEST(MoeLayerFactory, SpreadZeroGivesIdenticalExperts) {
  for (core::FfnType kind : kKinds) {
    const MoeLayerSpec s = spec_of(kind, 0.0f);
    const auto base = weights(*make_expert(kind, kHidden, kFfn, upcycle_base_seed(s.seed)));
    for (int e = 0; e < kExperts; ++e)
      for (const auto& [name, w] : expert_weights(s, e))
        EXPECT_EQ(max_abs_diff(w, base.at(name)), 0.0f) << name << " of expert " << e;
  }
}

TEST(MoeLayerFactory, SpreadGivesBasePlusSpreadTimesOwn) {
  for (core::FfnType kind : kKinds)
    for (float spread : {0.25f, 1.0f, 2.0f}) {  // powers of two: exact products
      const MoeLayerSpec s = spec_of(kind, spread);
      const auto base = weights(*make_expert(kind, kHidden, kFfn, upcycle_base_seed(s.seed)));
      for (int e = 0; e < kExperts; ++e) {
        const auto own = weights(*make_expert(kind, kHidden, kFfn, expert_seed(s.seed, e)));
        for (const auto& [name, w] : expert_weights(s, e))
          for (int64_t i = 0; i < w.size(); ++i)
            EXPECT_EQ(w[i], base.at(name)[i] + spread * own.at(name)[i]) << name << "[" << i << "]";
      }
    }
}

TEST(MoeLayerFactory, BaseSeedIsNoExpertsSeed) {
  for (uint64_t seed : {0ull, 11ull, 12345ull})
    for (int e = 0; e < 1000; ++e) EXPECT_NE(upcycle_base_seed(seed), expert_seed(seed, e));
}

TEST(MoeLayerFactory, ExpertParallelRanksHoldTheOneProcessExperts) {
  for (core::FfnType kind : kKinds)
    for (float spread : {-1.0f, 0.0f, 0.5f}) {
      const MoeLayerSpec s = spec_of(kind, spread);
      LocalExchange local;
      const auto want = layer_expert_weights(*make_moe_layer(s, local));
      ASSERT_FALSE(want.empty());
      testing::ExchangeBoard board(2);
      size_t seen = 0;
      for (int r = 0; r < 2; ++r) {
        testing::ThreadedExchange ex(board, r);
        const auto got = layer_expert_weights(*make_moe_layer(s, ex));
        for (const auto& [name, w] : got)
          EXPECT_EQ(max_abs_diff(w, want.at(name)), 0.0f) << name << " on rank " << r;
        seen += got.size();
      }
      EXPECT_EQ(seen, want.size());
    }
}

// A parameter of the unsharded expert, sliced as make_expert slices shard `s` of `shards`.
Tensor shard_of(const std::string& name, Tensor full, int s, int shards) {
  const int width = kFfn / shards;
  if (name == "w2") return full.slice_rows(s * width, width);
  if (name == "b1") {
    full.reshape({1, kFfn});
    Tensor part = full.slice_cols(s * width, width);
    part.reshape({width});
    return part;
  }
  if (name == "b2") return full;
  return full.slice_cols(s * width, width);
}

TEST(MoeLayerFactory, UpcycledShardsAreTheUpcycledExpertSliced) {
  for (core::FfnType kind : kKinds)
    for (int shards : {2, 3}) {
      const MoeLayerSpec whole = spec_of(kind, 0.5f);
      for (int e = 0; e < kExperts; ++e) {
        const auto full = expert_weights(whole, e);
        for (int sh = 0; sh < shards; ++sh)
          for (const auto& [name, w] : expert_weights(spec_of(kind, 0.5f, {sh, shards}), e))
            EXPECT_EQ(max_abs_diff(w, shard_of(name, full.at(name), sh, shards)), 0.0f)
                << name << " shard " << sh << " of " << shards << ", expert " << e;
      }
    }
}

// The gates' one spelling (`train --gate`, moecomm.torch's gate=): names round-trip, and
// the snake_case spelling is refused with the hyphenated one suggested.
TEST(MoeLayerFactory, GateNamesRoundTripAndNearMissesGetAHint) {
  EXPECT_EQ(gate_kind_names(),
            (std::vector<std::string>{"gshard", "sigmoid", "xmoe", "expert-choice"}));
  for (GateKind g :
       {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE, GateKind::kExpertChoice})
    EXPECT_EQ(parse_gate_kind(to_string(g), "gate"), g);
  EXPECT_EQ(moecomm::testing::error_of([] { parse_gate_kind("expert_choice", "--gate"); }),
            "--gate: must be one of gshard, sigmoid, xmoe, expert-choice, got 'expert_choice'; "
            "did you mean 'expert-choice'?");
  EXPECT_EQ(moecomm::testing::error_of([] { parse_gate_kind("topk", "--gate"); }),
            "--gate: must be one of gshard, sigmoid, xmoe, expert-choice, got 'topk'");
}

}  // namespace
}  // namespace moecomm::nn

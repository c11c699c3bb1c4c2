#include "rt/config_fingerprint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "sched/strategy.h"

namespace moecomm::rt {
namespace {

// The names of the settings whose values differ between a and b (same names, same order).
std::vector<std::string> differing(const TrainConfig& a, const TrainConfig& b) {
  const std::vector<Setting> x = train_settings(a), y = train_settings(b);
  EXPECT_EQ(x.size(), y.size());
  std::vector<std::string> out;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    EXPECT_EQ(x[i].name, y[i].name);
    if (x[i].value != y[i].value) out.push_back(x[i].name + " " + x[i].value + " -> " + y[i].value);
  }
  return out;
}

TEST(ConfigFingerprint, Fnv1aMatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
}

TEST(ConfigFingerprint, DisagreementNamesTheSettingAndWhichRanksHoldWhat) {
  EXPECT_EQ(disagreement("gate", {"gshard", "sigmoid", "sigmoid", "sigmoid"}),
            "ranks disagree on gate: rank 0 has gshard, ranks 1-3 have sigmoid");
  EXPECT_EQ(disagreement("strategy: a2a", {"flat", "2dh", "flat", "flat", "2dh", "2dh"}),
            "ranks disagree on strategy: a2a: ranks 0, 2-3 have flat, ranks 1, 4-5 have 2dh");
  EXPECT_EQ(disagreement("seed", {"1", "", "3"}),
            "ranks disagree on seed: rank 0 has 1, rank 1 has '', rank 2 has 3");
  const std::string longer(60, 'x');
  char hash[24];  // the hash's top 32 bits
  std::snprintf(hash, sizeof hash, "%08llx", static_cast<unsigned long long>(fnv1a(longer) >> 32));
  EXPECT_EQ(disagreement("cluster", {longer, "a"}), "ranks disagree on cluster: rank 0 has " +
                                                        std::string(32, 'x') + "... (hash " + hash +
                                                        "), rank 1 has a");
}

TEST(ConfigFingerprint, EachFlagOfTrainChangesItsOwnSetting) {
  const TrainConfig base;
  const std::vector<Setting> settings = train_settings(base);
  EXPECT_LE(settings.size(), static_cast<size_t>(kMaxSettings));
  std::set<std::string> names;
  for (const Setting& s : settings) EXPECT_TRUE(names.insert(s.name).second) << s.name;

  TrainConfig c = base;
  c.model.moe.gate = nn::GateKind::kSigmoid;
  EXPECT_EQ(differing(base, c), std::vector<std::string>{"gate gshard -> sigmoid"});
  c = base;
  c.model.moe.capacity_factor = 1.25f;
  EXPECT_EQ(differing(base, c), std::vector<std::string>{"capacity_factor 0 -> 1.25"});
  c = base;
  c.model.moe.router_groups = 4;
  c.model.moe.router_group_top_k = 2;
  EXPECT_EQ(differing(base, c), (std::vector<std::string>{"model: router_groups 1 -> 4",
                                                          "model: router_group_top_k 0 -> 2"}));
  c = base;
  c.model.moe.ffn_type = core::FfnType::kSwiglu;
  EXPECT_EQ(differing(base, c), std::vector<std::string>{"ffn_type gelu -> swiglu"});
  c = base;
  c.strategy.a2a = sched::Algorithm::k2DH;
  EXPECT_EQ(differing(base, c), std::vector<std::string>{"strategy: a2a flat -> 2dh"});
  c = base;
  c.strategy.hybrid_domain = 4;
  EXPECT_EQ(differing(base, c), std::vector<std::string>{"strategy: hybrid_domain 2 -> 4"});
  c = base;
  c.corpus = {1, 2, 3};
  TrainConfig d = c;
  d.corpus = {1, 2, 4};
  ASSERT_EQ(differing(c, d).size(), 1u);
  EXPECT_EQ(differing(c, d)[0].rfind("data 3 tokens, hash ", 0), 0u);
  c = base;
  c.data_seed = 7;
  c.steps = 3;
  EXPECT_EQ(differing(base, c), (std::vector<std::string>{"steps 200 -> 3", "seed 1 -> 7"}));
  // The strategy's display name labels the run; ranks may call one strategy two ways.
  c = base;
  c.strategy.name = "custom";
  EXPECT_TRUE(differing(base, c).empty());
}

TEST(ConfigFingerprint, RanksThatAgreePassAndOneRankThatDiffersIsNamed) {
  const int me = test::world_rank(), world = test::world_size();
  TrainConfig c;
  EXPECT_EQ(compare_settings(MPI_COMM_WORLD, train_settings(c)), "");
  if (world < 4) GTEST_SKIP() << "needs 4 ranks";
  if (me == 1) c.model.moe.capacity_factor = 1.25f;
  const std::string others = "ranks 0, 2-" + std::to_string(world - 1);
  EXPECT_EQ(compare_settings(MPI_COMM_WORLD, train_settings(c)),
            "ranks disagree on capacity_factor: " + others + " have 0, rank 1 has 1.25");
  // Several settings: the first is shown, the others named.
  if (me == world - 1) {
    c.strategy.a2a = sched::Algorithm::k1DH;
    c.data_seed = 9;
  }
  EXPECT_EQ(compare_settings(MPI_COMM_WORLD, train_settings(c)),
            "ranks disagree on capacity_factor: " + others + " have 0, rank 1 has 1.25 " +
                "(and on strategy: a2a, seed)");
}

}  // namespace
}  // namespace moecomm::rt

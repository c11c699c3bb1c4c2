#include "place/synthetic_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

SyntheticRoutingSpec small() {
  SyntheticRoutingSpec spec;
  spec.samples = 32;
  spec.tokens = 64;
  spec.experts = 16;
  spec.top_k = 2;
  spec.layers = 4;
  spec.iterations = 2;
  return spec;
}

// Experts a sample's tokens reach at one layer (through NetMoE Eq. 2 counts).
std::set<int> reached(const RoutingCounts& c, int sample) {
  std::set<int> out;
  for (int e = 0; e < c.experts; ++e)
    if (c.at(sample, e) > 0) out.insert(e);
  return out;
}

// Tokens routed to each expert at one layer, over all samples.
std::vector<int64_t> per_expert(const LayerRouting& layer, int experts) {
  RoutingCounts c = count_routing(layer, experts);
  std::vector<int64_t> out(experts, 0);
  for (int i = 0; i < c.samples; ++i)
    for (int e = 0; e < experts; ++e) out[e] += c.at(i, e);
  return out;
}

void expect_valid(const RoutingTrace& t, const SyntheticRoutingSpec& spec) {
  ASSERT_EQ(t.experts, spec.experts);
  ASSERT_EQ(t.top_k, spec.top_k);
  ASSERT_EQ(static_cast<int>(t.iterations.size()), spec.iterations);
  for (const auto& layers : t.iterations) {
    ASSERT_EQ(static_cast<int>(layers.size()), spec.layers);
    for (const LayerRouting& r : layers) {
      ASSERT_EQ(r.samples(), spec.samples);
      ASSERT_EQ(r.tokens(), spec.tokens);
      ASSERT_EQ(r.top_k(), spec.top_k);
      for (int i = 0; i < r.samples(); ++i)
        for (int tok = 0; tok < r.tokens(); ++tok) {
          std::set<int> ids;
          for (int k = 0; k < r.top_k(); ++k) {
            int e = r.at(i, tok, k);
            ASSERT_GE(e, 0);
            ASSERT_LT(e, spec.experts);
            ids.insert(e);
          }
          ASSERT_EQ(static_cast<int>(ids.size()), spec.top_k) << "duplicate id in a token";
        }
    }
  }
}

TEST(SyntheticRouting, DeterministicPerSeedAndDifferentAcrossSeeds) {
  SyntheticRoutingSpec spec = small();
  RoutingTrace a = generate_routing_trace(spec), b = generate_routing_trace(spec);
  spec.seed = 2;
  RoutingTrace c = generate_routing_trace(spec);
  for (int i = 0; i < 2; ++i)
    for (int l = 0; l < 4; ++l) {
      EXPECT_EQ(a.iterations[i][l].ids(), b.iterations[i][l].ids());
      EXPECT_NE(a.iterations[i][l].ids(), c.iterations[i][l].ids());
    }
  // Iterations differ from each other (preferences are redrawn per iteration).
  EXPECT_NE(a.iterations[0][0].ids(), a.iterations[1][0].ids());
}

TEST(SyntheticRouting, FirstIterationsDoNotDependOnIterationCount) {
  SyntheticRoutingSpec spec = small();
  RoutingTrace two = generate_routing_trace(spec);
  spec.iterations = 1;
  RoutingTrace one = generate_routing_trace(spec);
  for (int l = 0; l < spec.layers; ++l)
    EXPECT_EQ(one.iterations[0][l].ids(), two.iterations[0][l].ids());
}

TEST(SyntheticRouting, IdsInRangeAndDistinctWithinToken) {
  SyntheticRoutingSpec spec = small();
  expect_valid(generate_routing_trace(spec), spec);
  spec.preferred = 1;  // fewer preferred than top_k: filled up from the popularity
  spec.top_k = 4;
  expect_valid(generate_routing_trace(spec), spec);
  spec.preferred = 6;  // more preferred than top_k
  spec.locality = 0.9;
  expect_valid(generate_routing_trace(spec), spec);
  spec.experts = 8;  // every expert in every token, under heavy skew (exact draws)
  spec.top_k = 8;
  spec.preferred = 3;
  spec.skew = 10;
  expect_valid(generate_routing_trace(spec), spec);
  spec.experts = 1;
  spec.top_k = 1;
  spec.preferred = 1;
  expect_valid(generate_routing_trace(spec), spec);
}

TEST(SyntheticRouting, FullLocalityPutsTokensOnPreferredExperts) {
  SyntheticRoutingSpec spec = small();
  spec.locality = 1;
  spec.preferred = spec.top_k;
  RoutingTrace t = generate_routing_trace(spec);
  for (const auto& layers : t.iterations)
    for (const LayerRouting& r : layers) {
      RoutingCounts c = count_routing(r, spec.experts);
      for (int i = 0; i < spec.samples; ++i) {
        std::set<int> experts = reached(c, i);
        ASSERT_EQ(static_cast<int>(experts.size()), spec.top_k);
        for (int e : experts) EXPECT_EQ(c.at(i, e), spec.tokens);
      }
    }
}

TEST(SyntheticRouting, FullLocalityWithMorePreferredStaysInsideThem) {
  SyntheticRoutingSpec spec = small();
  spec.locality = 1;
  spec.preferred = 5;
  spec.top_k = 2;
  RoutingTrace t = generate_routing_trace(spec);
  RoutingCounts c = count_routing(t.iterations[0][1], spec.experts);
  for (int i = 0; i < spec.samples; ++i) EXPECT_LE(reached(c, i).size(), 5u);
  spec.preferred = 1;  // fewer: every token holds the one preferred expert
  spec.top_k = 3;
  t = generate_routing_trace(spec);
  c = count_routing(t.iterations[0][1], spec.experts);
  for (int i = 0; i < spec.samples; ++i) {
    int full = 0;
    for (int e = 0; e < spec.experts; ++e) full += c.at(i, e) == spec.tokens;
    EXPECT_GE(full, 1);
  }
}

// With locality 1 and preferred = top_k, each sample's reached set is its preferred set.
// layer_correlation = 1 must make set(l+1) = pi_l(set(l)) with one pi_l for all samples
// and all iterations; pi_l is recovered by intersecting, over the samples that prefer e at
// l, their sets at l+1.
TEST(SyntheticRouting, FullLayerCorrelationFollowsOneExpertMap) {
  SyntheticRoutingSpec spec = small();
  spec.samples = 200;
  spec.tokens = 8;
  spec.locality = 1;
  spec.preferred = spec.top_k;
  spec.layer_correlation = 1;
  spec.skew = 0;
  RoutingTrace t = generate_routing_trace(spec);
  auto sets = [&](int it, int l) {
    RoutingCounts c = count_routing(t.iterations[it][l], spec.experts);
    std::vector<std::set<int>> out;
    for (int i = 0; i < spec.samples; ++i) out.push_back(reached(c, i));
    return out;
  };
  for (int l = 0; l + 1 < spec.layers; ++l) {
    auto here = sets(0, l), next = sets(0, l + 1);
    std::map<int, int> pi;
    for (int e = 0; e < spec.experts; ++e) {
      std::set<int> common;
      bool first = true;
      for (int i = 0; i < spec.samples; ++i) {
        if (!here[i].count(e)) continue;
        std::set<int> both;
        for (int x : next[i])
          if (first || common.count(x)) both.insert(x);
        common = both;
        first = false;
      }
      if (first) continue;  // no sample prefers e here
      ASSERT_EQ(common.size(), 1u) << "layer " << l << " expert " << e;
      pi[e] = *common.begin();
    }
    std::set<int> images;
    for (auto [e, f] : pi) images.insert(f);
    EXPECT_EQ(images.size(), pi.size()) << "pi_l must be one-to-one";
    for (int it = 0; it < spec.iterations; ++it) {
      auto h = sets(it, l), n = sets(it, l + 1);
      for (int i = 0; i < spec.samples; ++i) {
        ASSERT_EQ(static_cast<int>(n[i].size()), spec.top_k);
        std::set<int> mapped;
        for (int e : h[i]) {
          ASSERT_TRUE(pi.count(e)) << "expert unseen in iteration 0";
          mapped.insert(pi[e]);
        }
        EXPECT_EQ(mapped, n[i]) << "iteration " << it << " layer " << l << " sample " << i;
      }
    }
  }
}

TEST(SyntheticRouting, NoSkewNoLocalityIsNearUniform) {
  SyntheticRoutingSpec spec = small();
  spec.samples = 64;
  spec.tokens = 256;
  spec.layers = 2;
  spec.iterations = 1;
  spec.skew = 0;
  spec.locality = 0;
  RoutingTrace t = generate_routing_trace(spec);
  for (const LayerRouting& r : t.iterations[0]) {
    std::vector<int64_t> n = per_expert(r, spec.experts);
    const double expected = 64.0 * 256 * 2 / 16;  // 2048
    double chi2 = 0;
    for (int64_t x : n) chi2 += (x - expected) * (x - expected) / expected;
    EXPECT_LT(chi2, 60) << "15 degrees of freedom: mean 15, sd 5.5";
  }
}

TEST(SyntheticRouting, SkewMakesTopExpertClearlyMorePopularThanMedian) {
  SyntheticRoutingSpec spec = small();
  spec.experts = 64;
  spec.skew = 1.5;
  RoutingTrace t = generate_routing_trace(spec);
  for (const LayerRouting& r : t.iterations[0]) {
    std::vector<int64_t> n = per_expert(r, spec.experts);
    std::sort(n.begin(), n.end());
    EXPECT_GT(n.back(), 3 * n[n.size() / 2]);
  }
}

// experts 4, top_k 2, skew 10: weights 1, 2^-10, 3^-10, 4^-10. The second draw of a token
// mostly needs the exact (non-rejection) path; its shares must match successive sampling:
// P(rank 1 in token) = 0.98225, P(rank 2 in token) = 0.01686.
TEST(SyntheticRouting, HeavySkewDistinctDrawsFollowRenormalizedPopularity) {
  SyntheticRoutingSpec spec = small();
  spec.samples = 64;
  spec.tokens = 256;
  spec.experts = 4;
  spec.layers = 1;
  spec.iterations = 1;
  spec.locality = 0;
  spec.skew = 10;
  RoutingTrace t = generate_routing_trace(spec);
  std::vector<int64_t> n = per_expert(t.iterations[0][0], spec.experts);
  std::sort(n.begin(), n.end(), std::greater<>());
  const double tokens = 64.0 * 256;
  EXPECT_GT(n[0] / tokens, 0.995);
  EXPECT_NEAR(n[1] / tokens, 0.98225, 0.006);
  EXPECT_NEAR(n[2] / tokens, 0.01686, 0.005);
}

// Node-limited routing: the most groups any token's experts lie in.
int most_groups_per_token(const RoutingTrace& t, int per_group) {
  int most = 0;
  for (const auto& layers : t.iterations)
    for (const LayerRouting& r : layers)
      for (int i = 0; i < r.samples(); ++i)
        for (int tok = 0; tok < r.tokens(); ++tok) {
          std::set<int> groups;
          for (int k = 0; k < r.top_k(); ++k) groups.insert(r.at(i, tok, k) / per_group);
          most = std::max(most, static_cast<int>(groups.size()));
        }
  return most;
}

TEST(SyntheticRouting, NodeLimitedRoutingNeverSendsATokenToMoreThanGroupTopKGroups) {
  SyntheticRoutingSpec spec = small();
  spec.samples = 8;
  spec.tokens = 32;
  spec.layers = 2;
  spec.experts = 32;
  spec.top_k = 6;
  for (double locality : {0.0, 0.5, 1.0})
    for (int preferred : {2, 6, 9})
      for (double skew : {0.0, 1.0, 10.0}) {
        spec.locality = locality;
        spec.preferred = preferred;
        spec.skew = skew;
        spec.router_groups = 1;
        spec.router_group_top_k = 0;
        const std::string at = "locality " + std::to_string(locality) + ", preferred " +
                               std::to_string(preferred) + ", skew " + std::to_string(skew);
        EXPECT_GT(most_groups_per_token(generate_routing_trace(spec), 4), 3) << at;
        spec.router_groups = 8;  // groups of 4
        for (int group_top_k : {2, 3}) {
          spec.router_group_top_k = group_top_k;
          const RoutingTrace t = generate_routing_trace(spec);
          expect_valid(t, spec);
          EXPECT_EQ(most_groups_per_token(t, 4), group_top_k) << at;
        }
      }
  // One expert per group: a token reaches exactly top_k groups.
  spec.router_groups = 32;
  spec.router_group_top_k = 6;
  EXPECT_EQ(most_groups_per_token(generate_routing_trace(spec), 1), 6);
}

// groups = 1, router_group_top_k = 0 or = groups: the plain generator, draw for draw.
TEST(SyntheticRouting, WithoutALimitNodeLimitedRoutingIsThePlainTrace) {
  SyntheticRoutingSpec spec = small();
  spec.preferred = 3;
  spec.locality = 0.7;
  const RoutingTrace plain = generate_routing_trace(spec);
  for (auto [groups, group_top_k] : {std::pair{1, 0}, {1, 1}, {4, 0}, {4, 4}, {16, 16}}) {
    spec.router_groups = groups;
    spec.router_group_top_k = group_top_k;
    const RoutingTrace t = generate_routing_trace(spec);
    for (int i = 0; i < spec.iterations; ++i)
      for (int l = 0; l < spec.layers; ++l)
        EXPECT_EQ(t.iterations[i][l].ids(), plain.iterations[i][l].ids()) << groups;
  }
}

// experts 4 in 2 groups, top_k 2 within 1 group, skew 10: a token's first expert is the most
// popular one with probability 1 / (1 + 2^-10 + 3^-10 + 4^-10) = 0.99902, and its second must
// be that expert's group partner, however unpopular (the exact draw past the rejections).
TEST(SyntheticRouting, NodeLimitedDrawsStayInsideTheFirstExpertsGroup) {
  SyntheticRoutingSpec spec = small();
  spec.samples = 64;
  spec.tokens = 256;
  spec.experts = 4;
  spec.layers = 1;
  spec.iterations = 1;
  spec.locality = 0;
  spec.skew = 10;
  spec.router_groups = 2;
  spec.router_group_top_k = 1;
  const RoutingTrace t = generate_routing_trace(spec);
  EXPECT_EQ(most_groups_per_token(t, 2), 1);
  std::vector<int64_t> n = per_expert(t.iterations[0][0], spec.experts);
  const double tokens = 64.0 * 256;
  const int top = static_cast<int>(std::max_element(n.begin(), n.end()) - n.begin());
  EXPECT_GT(n[static_cast<size_t>(top)] / tokens, 0.997);
  EXPECT_EQ(n[static_cast<size_t>(top ^ 1)], n[static_cast<size_t>(top)]);  // its partner
}

TEST(SyntheticRouting, ValidateRejectsEachBadField) {
  auto bad = [](auto change) {
    SyntheticRoutingSpec spec;
    change(spec);
    return spec;
  };
  EXPECT_NO_THROW(validate(SyntheticRoutingSpec{}));
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.samples = 0; })), "synthetic routing: samples",
                   "must be positive, got 0");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.tokens = -1; })), "synthetic routing: tokens",
                   "positive");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.layers = 0; })), "synthetic routing: layers",
                   "positive");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.iterations = 0; })),
                   "synthetic routing: iterations", "positive");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.experts = 0; })), "synthetic routing: experts",
                   "must be in [1, 1000000], got 0");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.experts = 1'000'001; })),
                   "synthetic routing: experts", "1000000");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.top_k = 65; })), "synthetic routing: top_k",
                   "must be in [1, experts = 64], got 65");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.top_k = 0; })), "synthetic routing: top_k");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.preferred = 0; })), "synthetic routing: preferred",
                   "[1, experts = 64]");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.preferred = 65; })), "synthetic routing: preferred",
                   "got 65");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.locality = 1.5; })),
                   "synthetic routing: locality: must be in [0, 1], got 1.5");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.locality = -0.1; })), "synthetic routing: locality",
                   "got -0.1");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.locality = std::nan(""); })),
                   "synthetic routing: locality", "nan");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.layer_correlation = 2; })),
                   "synthetic routing: layer_correlation", "[0, 1]");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.skew = -1; })), "synthetic routing: skew",
                   "[0, 10]");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.skew = 11; })), "synthetic routing: skew",
                   "got 11");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) {
                     s.samples = 1 << 20;
                     s.tokens = 1 << 10;
                   })),
                   "synthetic routing", "too large", "2147483648");
  EXPECT_ERROR_HAS(generate_routing_trace(bad([](auto& s) { s.top_k = 100; })),
                   "synthetic routing: top_k");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.router_groups = 0; })),
                   "synthetic routing: router_groups", "must be >= 1, got 0");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) { s.router_groups = 5; })),
                   "synthetic routing: router_groups", "does not divide experts = 64");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) {
                     s.router_groups = 8;
                     s.router_group_top_k = 9;
                   })),
                   "synthetic routing: router_group_top_k", "must be in [0, router_groups = 8]");
  EXPECT_ERROR_HAS(validate(bad([](auto& s) {
                     s.router_groups = 64;
                     s.router_group_top_k = 1;
                   })),
                   "synthetic routing: router_group_top_k", "is fewer than top_k = 2");
}

}  // namespace
}  // namespace moecomm::place

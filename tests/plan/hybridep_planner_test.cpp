#include "plan/hybridep_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

// HybridEP Table IV, G = 8, B = 128. Units: the p column works out only when D and P_E are
// read in the same unit family as B (Gbit/s with Mbit, or GB/s with MB), so we take
// B = 128 GB/s = 128e9 bytes/s and D, P_E in MB (1e6 bytes). Lat_comp^Ep cancels in Eq. 8 (the
// paper overlaps it fully, Eq. 7), so any value works; we use 10 us.
HybridEpStreamInput table_iv(double pre_expert_ms, double d_mb, double pe_mb) {
  HybridEpStreamInput in;
  in.gpus = 8;
  in.bandwidth = 128e9;
  in.data_bytes = d_mb * 1e6;
  in.expert_bytes = pe_mb * 1e6;
  in.compute = {pre_expert_ms * 1e-3, 10e-6, 1};
  return in;
}
const HybridEpStreamInput kMix1 = table_iv(0.049, 8, 4.7);
const HybridEpStreamInput kMix2 = table_iv(0.049, 8, 2.35);
const HybridEpStreamInput kAgOnly1 = table_iv(0.099, 3, 0.094);
const HybridEpStreamInput kAgOnly2 = table_iv(0.099, 3, 0.047);

TEST(HybridEpStream, TableIVOptimalDomainAndP) {
  // Table IV's p column is the share of D that stays A2A, (G - S) / G, for S = 2, 4, 8, 8.
  const struct {
    const HybridEpStreamInput* in;
    int domain;
    double table_p;
  } cases[] = {{&kMix1, 2, 0.75}, {&kMix2, 4, 0.5}, {&kAgOnly1, 8, 0.0}, {&kAgOnly2, 8, 0.0}};
  for (const auto& c : cases) {
    const HybridEpDomainChoice best = hybridep_best_domain(*c.in);
    EXPECT_EQ(best.domain_size, c.domain);
    EXPECT_DOUBLE_EQ(hybridep_a2a_share(8, best.domain_size), c.table_p);
    EXPECT_DOUBLE_EQ(best.p, (8.0 - c.domain) / 7.0);  // Definition 1
  }
}

TEST(HybridEpStream, TableIVCasesAndContinuousOptimum) {
  // Table IV text: Mix-1/2 are Case 2.1 (2D < G P_E), AG-only-1/2 Case 2.2.
  // Mix-1: p_b = 1 - 128e9 * 0.049e-3 / (4.7e6 * 7) = 1 - 6.272 / 32.9.
  const HybridEpOptimum mix1 = hybridep_optimal_p(kMix1);
  EXPECT_EQ(mix1.kind, HybridEpCase::kCase2_1);
  EXPECT_NEAR(mix1.p, 1 - 6.272 / 32.9, 1e-12);
  EXPECT_NEAR(mix1.p, 0.80936, 1e-5);
  EXPECT_EQ(mix1.region, HybridEpCase::kCase1);  // the optimum sits on the Case 1 boundary
  // Mix-2: 1 - 6.272 / 16.45.
  const HybridEpOptimum mix2 = hybridep_optimal_p(kMix2);
  EXPECT_EQ(mix2.kind, HybridEpCase::kCase2_1);
  EXPECT_NEAR(mix2.p, 1 - 6.272 / 16.45, 1e-12);
  for (const HybridEpStreamInput* in : {&kAgOnly1, &kAgOnly2}) {
    const HybridEpOptimum o = hybridep_optimal_p(*in);
    EXPECT_EQ(o.kind, HybridEpCase::kCase2_2);
    EXPECT_EQ(o.p, 0.0);
    // B Lat_PE = 12.672 MB hides even the full AllGather (7 P_E): all of [0, 1] is Case 1.
    EXPECT_EQ(o.region, HybridEpCase::kCase1);
    EXPECT_LT(hybridep_case_boundary(*in), 0.0);
  }
}

TEST(HybridEpStream, GbpsAgainstMegabytesDoesNotGiveTableIV) {
  // The other reading, 128 Gbit/s = 16e9 bytes/s against MB, picks plain EP for Mix-1.
  HybridEpStreamInput in = kMix1;
  in.bandwidth = 16e9;
  EXPECT_EQ(hybridep_best_domain(in).domain_size, 1);
}

TEST(HybridEpStream, TermsByHand) {
  // Mix-1 at p = 0.75 (us): A2A = 0.75 * 8e6 * 7/8 / 128e9 = 41.015625; AG = 0.25 * 7 * 4.7e6 /
  // 128e9 = 64.2578125; compute = 49 + 10; overlap = min(49, 64.26) + 10 = 59.
  const HybridEpStreamTimes t = hybridep_stream_times(kMix1, 0.75);
  EXPECT_NEAR(t.a2a_seconds, 41.015625e-6, 1e-15);
  EXPECT_NEAR(t.allgather_seconds, 64.2578125e-6, 1e-15);
  EXPECT_NEAR(t.comm_seconds, 146.2890625e-6, 1e-15);
  EXPECT_NEAR(t.compute_seconds, 59e-6, 1e-15);
  EXPECT_NEAR(t.overlap_seconds, 59e-6, 1e-15);
  EXPECT_NEAR(t.total_seconds, 146.2890625e-6, 1e-15);
  EXPECT_EQ(hybridep_case_at(kMix1, 0.75), HybridEpCase::kCase2_1);
  EXPECT_EQ(hybridep_case_at(kMix1, 0.9), HybridEpCase::kCase1);
}

TEST(HybridEpStream, Eq11AndEq12ClosedForms) {
  const HybridEpStreamInput& in = kMix1;
  const double g = in.gpus, b = in.bandwidth, d = in.data_bytes, pe = in.expert_bytes;
  const double lat_pe = in.compute.pre_expert_seconds;
  for (double p : {0.85, 0.9, 1.0}) {  // Case 1 (p >= 0.809)
    ASSERT_EQ(hybridep_case_at(in, p), HybridEpCase::kCase1);
    EXPECT_NEAR(hybridep_stream_times(in, p).total_seconds, lat_pe + 2 * d * (g - 1) / (g * b) * p,
                1e-15);
  }
  for (double p : {0.0, 0.3, 0.8}) {  // Case 2.1
    ASSERT_EQ(hybridep_case_at(in, p), HybridEpCase::kCase2_1);
    EXPECT_NEAR(hybridep_stream_times(in, p).total_seconds,
                p * (g - 1) * (2 * d - g * pe) / (b * g) + (g - 1) * pe / b, 1e-15);
  }
}

TEST(HybridEpStream, OptimumMatchesFineGridOnRandomInputs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int kinds[2] = {0, 0};
  for (int trial = 0; trial < 200; ++trial) {
    HybridEpStreamInput in;
    in.gpus = 2 + static_cast<int>(u(rng) * 30);
    in.bandwidth = std::pow(10.0, 9 + 2 * u(rng));
    in.data_bytes = std::pow(10.0, 5 + 3 * u(rng));
    in.expert_bytes = std::pow(10.0, 5 + 3 * u(rng));
    in.compute = {std::pow(10.0, -5 + 3 * u(rng)), 1e-4 * u(rng), 1 + trial % 3};
    const HybridEpOptimum o = hybridep_optimal_p(in);
    ++kinds[o.kind == HybridEpCase::kCase2_1];
    double grid_min = std::numeric_limits<double>::infinity();
    for (int i = 0; i <= 2000; ++i)
      grid_min = std::min(grid_min, hybridep_stream_times(in, i / 2000.0).total_seconds);
    EXPECT_LE(o.total_seconds, grid_min * (1 + 1e-12)) << "trial " << trial;
    EXPECT_DOUBLE_EQ(o.total_seconds, hybridep_stream_times(in, o.p).total_seconds);
  }
  EXPECT_GT(kinds[0], 10);  // both Case 2.1 and 2.2 were exercised
  EXPECT_GT(kinds[1], 10);
}

TEST(HybridEpStream, DomainMappings) {
  EXPECT_DOUBLE_EQ(hybridep_p_of_domain(8, 1), 1.0);  // plain EP
  EXPECT_DOUBLE_EQ(hybridep_p_of_domain(8, 8), 0.0);  // AllGather only
  EXPECT_DOUBLE_EQ(hybridep_p_of_domain(8, 2), 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(hybridep_a2a_share(8, 2), 0.75);
  EXPECT_DOUBLE_EQ(hybridep_a2a_share(8, 1), 0.875);  // the local chunk never moves
}

// Borrowed from HybridEP Table VI: 24 MB data, 8 MB experts, DCs joined by 10 Gbit/s and GPUs
// by 128 Gbit/s (1.25e9 and 16e9 bytes/s). The paper gives no Lat_PE; with our 8 ms the
// multilevel model picks Table VI's domains for Cluster-M (2, 2) and Cluster-L (4, 1).
HybridEpLayerInput table_vi(int dcs) {
  HybridEpLayerInput in;
  in.levels = {{dcs, 1.25e9}, {8, 16e9}};
  in.data_bytes = 24e6;
  in.expert_bytes = 8e6;
  in.compute = {8e-3, 0.0, 1};
  return in;
}

TEST(HybridEpLayer, TwoLevelTermsByHand) {
  // (2, 2): level 0 A2A 0, AG 8e6 / 1.25e9 = 6.4 ms; level 1 A2A 24e6 * 6/8 / 16e9 = 1.125 ms,
  // AG 8e6 * 2 (forwarded from level 0) * 1 / 16e9 = 1 ms. Total max(8, 7.4) + 2 * 1.125.
  const HybridEpLayerTimes t = hybridep_layer_times(table_vi(2), {2, 2});
  EXPECT_DOUBLE_EQ(t.a2a_level_seconds[0], 0.0);
  EXPECT_NEAR(t.allgather_level_seconds[0], 6.4e-3, 1e-15);
  EXPECT_NEAR(t.a2a_level_seconds[1], 1.125e-3, 1e-15);
  EXPECT_NEAR(t.allgather_level_seconds[1], 1e-3, 1e-15);
  EXPECT_NEAR(t.allgather_seconds, 7.4e-3, 1e-15);
  EXPECT_NEAR(t.total_seconds, 10.25e-3, 1e-15);
  EXPECT_DOUBLE_EQ(t.p[0], 0.0);
  EXPECT_DOUBLE_EQ(t.p[1], 6.0 / 7.0);
}

// Not a reproduction of Table VI: the paper gives no Lat_PE, and no single value gives all
// three of its clusters' choices (Cluster-S's S = 4 would need about 1 ms). A consistency
// check of the multilevel model on Table VI's shapes at the assumed 8 ms.
TEST(HybridEpLayer, PlanOnTableVIShapes) {
  const HybridEpPlan m = hybridep_plan(table_vi(2));
  EXPECT_EQ(m.domain_sizes, (std::vector<int>{2, 2}));
  EXPECT_NEAR(m.forward.total_seconds, 10.25e-3, 1e-15);
  const HybridEpPlan l = hybridep_plan(table_vi(4));
  EXPECT_EQ(l.domain_sizes, (std::vector<int>{4, 1}));
  // 3 * 8e6 / 1.25e9 = 19.2 ms of AllGather, then 2 * 24e6 * 7/8 / 16e9.
  EXPECT_NEAR(l.forward.total_seconds, 19.2e-3 + 2.625e-3, 1e-15);
}

TEST(HybridEpLayer, PlanIsTheMinimumOverAllDomainCombinations) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int counts[] = {1, 2, 3, 4, 6, 8, 12};
  for (int trial = 0; trial < 50; ++trial) {
    HybridEpLayerInput in;
    in.levels = {{counts[trial % 7], 1e9 * (1 + 9 * u(rng))},
                 {counts[(trial / 7) % 7], 1e10 * (1 + 9 * u(rng))}};
    in.data_bytes = 1e6 * (1 + 50 * u(rng));
    in.expert_bytes = 1e6 * (1 + 20 * u(rng));
    in.compute = {1e-2 * u(rng), 1e-3 * u(rng), 2};
    const HybridEpPlan plan = hybridep_plan(in);
    for (int s0 = 1; s0 <= in.levels[0].count; ++s0)
      for (int s1 = 1; s1 <= in.levels[1].count; ++s1) {
        if (in.levels[0].count % s0 || in.levels[1].count % s1) continue;
        EXPECT_LE(plan.forward.total_seconds, hybridep_layer_times(in, {s0, s1}).total_seconds);
      }
  }
}

TEST(HybridEpLayer, OneLevelIsTheStreamModel) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    HybridEpStreamInput s;
    s.gpus = 2 + trial % 15;
    s.bandwidth = 1e9 * (1 + 99 * u(rng));
    s.data_bytes = 1e6 * (1 + 99 * u(rng));
    s.expert_bytes = 1e6 * (1 + 20 * u(rng));
    s.compute = {1e-3 * u(rng), 1e-4 * u(rng), 1 + trial % 4};
    const HybridEpLayerInput l{{{s.gpus, s.bandwidth}}, s.data_bytes, s.expert_bytes, s.compute};
    for (int d = 1; d <= s.gpus; ++d) {
      if (s.gpus % d) continue;
      const HybridEpStreamTimes a = hybridep_stream_times(s, hybridep_p_of_domain(s.gpus, d));
      const HybridEpLayerTimes b = hybridep_layer_times(l, {d});
      EXPECT_NEAR(a.total_seconds, b.total_seconds, 1e-12 * a.total_seconds);
      EXPECT_NEAR(a.allgather_seconds, b.allgather_seconds, 1e-12 * a.total_seconds);
    }
    const HybridEpDomainChoice best = hybridep_best_domain(s);
    EXPECT_EQ(hybridep_plan(l).domain_sizes, std::vector<int>{best.domain_size});
  }
}

TEST(HybridEpLayer, BackwardByHand) {
  // Same pairs and volumes with 8 MB of uncompressed gradients; pre-expert backward 16 ms
  // hides the 7.4 ms ReduceScatter: 16 + 2 * 1.125 ms.
  const HybridEpLayerTimes b = hybridep_backward_times(table_vi(2), {8e6, {16e-3, 0.0, 1}}, {2, 2});
  EXPECT_NEAR(b.allgather_seconds, 7.4e-3, 1e-15);
  EXPECT_NEAR(b.total_seconds, 18.25e-3, 1e-15);
  // With 20 MB of gradients the ReduceScatter (18.5 ms) is no longer hidden.
  const HybridEpLayerTimes c =
      hybridep_backward_times(table_vi(2), {20e6, {16e-3, 0.0, 1}}, {2, 2});
  EXPECT_NEAR(c.total_seconds, 18.5e-3 + 2.25e-3, 1e-15);
}

TEST(HybridEpPlanner, BadInput) {
  auto with = [](auto f) {
    HybridEpStreamInput in = kMix1;
    f(in);
    return in;
  };
  EXPECT_ERROR_HAS(hybridep_stream_times(with([](auto& i) { i.gpus = 1; }), 0.5),
                   "hybridep planner", "G must be >= 2");
  EXPECT_ERROR_HAS(hybridep_stream_times(with([](auto& i) { i.bandwidth = 0; }), 0.5),
                   "bandwidth B must be positive");
  EXPECT_ERROR_HAS(hybridep_stream_times(with([](auto& i) { i.data_bytes = -1; }), 0.5),
                   "data bytes D");
  EXPECT_ERROR_HAS(hybridep_optimal_p(with([](auto& i) { i.expert_bytes = 0; })),
                   "expert bytes P_E");
  EXPECT_ERROR_HAS(hybridep_case_boundary(with([](auto& i) { i.compute.pre_expert_seconds = -1; })),
                   "pre-expert seconds");
  EXPECT_ERROR_HAS(hybridep_case2_kind(with([](auto& i) {
                     i.compute.expert_seconds = std::numeric_limits<double>::quiet_NaN();
                   })),
                   "expert seconds");
  EXPECT_ERROR_HAS(hybridep_best_domain(with([](auto& i) { i.compute.experts_per_gpu = 0; })),
                   "experts per GPU");
  EXPECT_ERROR_HAS(hybridep_stream_times(kMix1, 1.5), "p must be in [0, 1]");
  EXPECT_ERROR_HAS(hybridep_case_at(kMix1, std::numeric_limits<double>::quiet_NaN()),
                   "p must be in [0, 1]");
  EXPECT_ERROR_HAS(hybridep_p_of_domain(8, 3), "domain size 3", "divide G = 8");
  EXPECT_ERROR_HAS(hybridep_a2a_share(1, 1), "G must be >= 2");

  HybridEpLayerInput l = table_vi(2);
  EXPECT_ERROR_HAS(hybridep_layer_times(l, {2}), "one domain size per level");
  EXPECT_ERROR_HAS(hybridep_layer_times(l, {2, 3}), "level 1", "divide the count 8");
  EXPECT_ERROR_HAS(hybridep_layer_times(l, {0, 1}), "level 0", "domain size 0");
  EXPECT_ERROR_HAS(hybridep_backward_times(l, {0.0, {1e-3, 0.0, 1}}, {2, 2}),
                   "expert gradient bytes");
  l.levels[1].bandwidth = -1;
  EXPECT_ERROR_HAS(hybridep_plan(l), "level 1", "bandwidth must be positive");
  l.levels[1] = {0, 1e9};
  EXPECT_ERROR_HAS(hybridep_plan(l), "level 1", "count must be >= 1");
  l.levels.clear();
  EXPECT_ERROR_HAS(hybridep_plan(l), "at least one level");
}

}  // namespace
}  // namespace moecomm::plan

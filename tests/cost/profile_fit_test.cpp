#include "cost/profile_fit.h"

#include <gtest/gtest.h>

#include "core/topology.h"
#include "cost/collective_model.h"
#include "support/expect_error.h"

namespace moecomm::cost {
namespace {

constexpr Collective kOps[] = {Collective::kAllToAll, Collective::kAllGather,
                               Collective::kReduceScatter, Collective::kAllReduce};

// The time the simulator gives `op` over n members of a level (latency, bytes/s), slowed to
// `efficiency` of the bandwidth.
double sim_time(Collective op, int n, double bytes, double latency, double bandwidth,
                double efficiency = 1) {
  ProfileRow r{"", op, n, bytes, 1, ""};
  return sim_latency_steps(op, n) * latency + link_bytes(r) / (bandwidth * efficiency);
}

// Rows of every collective at 4 KiB .. 16 MiB by 4, on an exact alpha-beta level.
std::vector<ProfileRow> exact_rows(const std::string& level, int n, double latency,
                                   double bandwidth) {
  std::vector<ProfileRow> rows;
  for (Collective op : kOps)
    for (double s = 4096; s <= 16 << 20; s *= 4)
      rows.push_back({level, op, n, s, sim_time(op, n, s, latency, bandwidth), "test"});
  return rows;
}

TEST(ProfileFit, BusBandwidthFollowsNcclTests) {
  ProfileRow a2a{"gpu", Collective::kAllToAll, 4, 8e6, 2e-3, "x"};
  EXPECT_DOUBLE_EQ(algbw(a2a), 4e9);
  EXPECT_DOUBLE_EQ(busbw(a2a), 3e9);  // x (n-1)/n
  EXPECT_DOUBLE_EQ(link_bytes(a2a), 6e6);
  ProfileRow ar{"gpu", Collective::kAllReduce, 4, 8e6, 2e-3, "x"};
  EXPECT_DOUBLE_EQ(busbw(ar), 6e9);  // x 2(n-1)/n
  EXPECT_EQ(sim_latency_steps(Collective::kAllToAll, 4), 1);
  EXPECT_EQ(message_overheads(Collective::kAllToAll, 4), 6);
  EXPECT_EQ(sim_latency_steps(Collective::kReduceScatter, 4), 3);
  EXPECT_EQ(message_overheads(Collective::kAllReduce, 4), 12);
}

TEST(ProfileFit, ExactAlphaBetaGivesItBackWithEfficiencyOne) {
  for (int n : {2, 3, 8}) {
    const auto rows = exact_rows("node", n, 25e-6, 1.25e9);
    const ProfileFit fit = fit_profile(rows, {{"node", n}});
    ASSERT_EQ(fit.levels.size(), 1u);
    EXPECT_NEAR(fit.levels[0].bandwidth, 1.25e9, 1.25e9 * 1e-9);
    EXPECT_NEAR(fit.levels[0].latency, 25e-6, 1e-12);
    EXPECT_NEAR(fit.levels[0].r_squared, 1.0, 1e-12);
    ASSERT_EQ(fit.efficiency.at("node").size(), 4u);
    for (const auto& [op, points] : fit.efficiency.at("node")) {
      ASSERT_EQ(points.size(), 7u) << op;
      for (auto [bytes, e] : points) EXPECT_NEAR(e, 1.0, 1e-9) << op << " " << bytes;
    }
  }
}

// LogGP: an A2A's intercept is L + 2(n-1) o, a ring AllGather's (n-1)(L + 2o); together they
// give the latency and the per-message overhead back, and every curve stays at 1.
TEST(ProfileFit, ExactLogGpGivesLatencyAndOverheadBack) {
  for (int n : {3, 4, 8}) {
    const double latency = 20e-6, overhead = 3e-6, bandwidth = 2e9;
    std::vector<ProfileRow> rows;
    for (Collective op : kOps)
      for (double s = 4096; s <= 16 << 20; s *= 4) {
        ProfileRow r{"node", op, n, s, 0, "test"};
        r.seconds = fixed_seconds(op, n, latency, overhead) + link_bytes(r) / bandwidth;
        rows.push_back(r);
      }
    const ProfileFit fit = fit_profile(rows, {{"node", n}});
    EXPECT_NEAR(fit.levels[0].latency, latency, 1e-12) << n;
    EXPECT_NEAR(fit.levels[0].overhead, overhead, 1e-12) << n;
    for (const auto& [op, points] : fit.efficiency.at("node"))
      for (auto [bytes, e] : points) EXPECT_NEAR(e, 1.0, 1e-9) << op << " " << bytes;
    const core::Cluster c = profiled_cluster(fit, {1e12, 8e9, 1e10}, "t");
    EXPECT_NEAR(c.levels[0].overhead, overhead, 1e-12);
  }
  // Two members: the intercepts coincide (L + 2o both), so the overhead stays in the latency.
  const ProfileFit two = fit_profile(exact_rows("node", 2, 25e-6, 1e9), {{"node", 2}});
  EXPECT_EQ(two.levels[0].overhead, 0.0);
}

TEST(ProfileFit, FitsOnlyTheBandwidthBoundSizes) {
  auto rows = exact_rows("gpu", 2, 50e-6, 1e9);
  rows[0].seconds = 60e-6;  // 4 KiB and 16 KiB slower than alpha-beta (start-up effects)
  rows[1].seconds = 70e-6;
  const LevelFit fit = fit_level(rows, {"gpu", 2});
  EXPECT_NEAR(fit.bandwidth, 1e9, 1e9 * 1e-9);
  EXPECT_NEAR(fit.latency, 50e-6, 1e-12);
  EXPECT_EQ(fit.sizes, 4);  // 256 KiB .. 16 MiB take at least twice the 60 us
  // The curve takes up what the line misses: 60 us = 1 latency (model: n-1 = 1) + 2048 B / e.
  const auto points = efficiency_points(rows, Collective::kAllToAll, fit);
  EXPECT_DOUBLE_EQ(points[0].first, 4096);
  EXPECT_NEAR(points[0].second, 2048 / 1e9 / 10e-6, 1e-9);
}

TEST(ProfileFit, EfficiencyMakesTheModelReproduceTheMeasurement) {
  const int n = 4;
  auto rows = exact_rows("gpu", n, 10e-6, 2e9);
  for (ProfileRow& r : rows)  // AllGather at 30% .. 90% of the link
    if (r.op == Collective::kAllGather)
      r.seconds = sim_time(r.op, n, r.bytes, 10e-6, 2e9, 0.3 + r.bytes / (16 << 20) * 0.6);
  const ProfileFit fit = fit_profile(rows, {{"gpu", n}});
  const core::Cluster cluster = profiled_cluster(fit, {1e12, 8e9, 1e10}, "test");
  const core::Topology topology(cluster);
  const CollectiveModel model(topology);
  for (const ProfileRow& r : rows) {
    EXPECT_NEAR(model.time(r.op, 0, n, r.bytes), r.seconds, 1e-12 + 1e-9 * r.seconds)
        << collective_name(r.op) << " " << r.bytes;
  }
}

TEST(ProfileFit, EfficiencyIsClampedToTheFormatsRange) {
  auto rows = exact_rows("gpu", 2, 10e-6, 1e9);
  rows.push_back({"gpu", Collective::kAllReduce, 2, 1 << 26, 1e-3, "x"});   // faster than the link
  rows.push_back({"gpu", Collective::kAllReduce, 2, 1 << 27, 15e-6, "x"});  // within the latency
  const ProfileFit fit = fit_profile(rows, {{"gpu", 2}});
  for (const auto& [op, points] : fit.efficiency.at("gpu"))
    for (auto [bytes, e] : points) {
      EXPECT_GT(e, 0) << op;
      EXPECT_LE(e, 1) << op;
    }
  const auto& ar = fit.efficiency.at("gpu").at("allreduce");
  EXPECT_DOUBLE_EQ(ar.back().second, 1.0);
  EXPECT_DOUBLE_EQ(ar[ar.size() - 2].second, 1.0);
}

TEST(ProfileFit, ClusterFileRoundTrips) {
  auto rows = exact_rows("node", 2, 30e-6, 1.2e7);
  for (ProfileRow& r : exact_rows("gpu", 2, 2e-6, 5e9)) rows.push_back(r);
  const ProfileFit fit = fit_profile(rows, {{"node", 2}, {"gpu", 2}});
  const core::Cluster c = profiled_cluster(fit, {5e10, 4e9, 6e9}, "profiled-2x2");
  const core::Cluster back = core::parse_cluster(core::cluster_to_json(c), "profiled.json");
  ASSERT_EQ(back.levels.size(), 2u);
  EXPECT_EQ(back.levels[0].name, "node");
  EXPECT_EQ(back.world_size(), 4);
  EXPECT_NEAR(back.levels[0].bandwidth, 1.2e7, 1.2e7 * 1e-9);
  EXPECT_NEAR(back.levels[1].latency, 2e-6, 1e-12);
  EXPECT_EQ(back.curve("gpu", "allreduce").size(), 7u);
  EXPECT_NE(back.description.find("node R^2 1.0000 over"), std::string::npos) << back.description;
  EXPECT_FALSE(back.network_priorities);               // MPI over TCP and shared memory: one class
  EXPECT_EQ(back.fairness, core::Fairness::kPerFlow);  // TCP connections share per flow
}

// What profile writes must read back as --cluster reads it: a fit or a measurement outside
// the cluster file's ranges is refused naming the key, and efficiencies are clamped into it.
TEST(ProfileFit, TheClusterFileStaysInsideTheStatedRanges) {
  const ProfileFit fast = fit_profile(exact_rows("gpu", 2, 2e-6, 2e15), {{"gpu", 2}});
  EXPECT_ERROR_HAS(profiled_cluster(fast, {5e10, 4e9, 6e9}, "p"), "the fitted cluster \"p\"",
                   "levels[0].bandwidth_GBps", "too large");
  const ProfileFit fit = fit_profile(exact_rows("gpu", 2, 2e-6, 5e9), {{"gpu", 2}});
  EXPECT_ERROR_HAS(profiled_cluster(fit, {1e3, 4e9, 6e9}, "p"), "device.tflops", "too small");
  auto slow = exact_rows("gpu", 2, 2e-6, 5e9);
  slow.push_back({"gpu", Collective::kAllReduce, 2, 1 << 25, 1e3, "test"});  // 1000 s
  const ProfileFit noisy = fit_profile(slow, {{"gpu", 2}});
  EXPECT_DOUBLE_EQ(noisy.efficiency.at("gpu").at("allreduce").back().second, core::kShare.min);
  EXPECT_NO_THROW(profiled_cluster(noisy, {5e10, 4e9, 6e9}, "p"));
}

TEST(ProfileFit, Errors) {
  auto rows = exact_rows("gpu", 2, 10e-6, 1e9);
  std::vector<ProfileRow> one_size;
  for (const ProfileRow& r : rows)
    if (r.bytes == 4096) one_size.push_back(r);
  EXPECT_ERROR_HAS(fit_level(one_size, {"gpu", 2}), "level gpu: alltoall",
                   "1 size(s); the fit needs at least 2");
  EXPECT_ERROR_HAS(fit_level({}, {"gpu", 2}), "0 size(s)");

  auto bad = rows;
  bad[2].seconds = 0;
  EXPECT_ERROR_HAS(fit_level(bad, {"gpu", 2}), "gpu alltoall 65536 bytes", "time must be positive");
  bad[2].seconds = -1e-3;
  EXPECT_ERROR_HAS(fit_profile(bad, {{"gpu", 2}}), "time must be positive");
  bad[2].seconds = std::nan("");
  EXPECT_ERROR_HAS(fit_profile(bad, {{"gpu", 2}}), "time must be positive and finite");
  bad = rows;
  bad[3].bytes = 0;
  EXPECT_ERROR_HAS(fit_profile(bad, {{"gpu", 2}}), "size must be positive");
  bad = rows;
  bad[3].ranks = 3;
  EXPECT_ERROR_HAS(fit_profile(bad, {{"gpu", 2}}), "over 3 ranks, but the level has 2 workers");
  bad = rows;
  bad.push_back(rows[0]);
  EXPECT_ERROR_HAS(fit_profile(bad, {{"gpu", 2}}), "4096 bytes", "size measured twice");
  EXPECT_ERROR_HAS(fit_profile(rows, {{"node", 2}}), "profile row gpu", "names no profiled level");

  bad = rows;  // flat or falling: no bandwidth to fit
  for (ProfileRow& r : bad) r.seconds = 1e-3 - r.bytes * 1e-12;
  EXPECT_ERROR_HAS(fit_level(bad, {"gpu", 2}), "do not grow with the size");
}

TEST(ProfileFit, NoisyBandwidthBoundSizesFallBackToEverySize) {
  // The two sizes at least twice the shortest time fall (noise); all four still grow.
  const std::vector<ProfileRow> rows = {{"gpu", Collective::kAllToAll, 2, 4096, 1.0e-3, "x"},
                                        {"gpu", Collective::kAllToAll, 2, 16384, 1.2e-3, "x"},
                                        {"gpu", Collective::kAllToAll, 2, 65536, 3.0e-3, "x"},
                                        {"gpu", Collective::kAllToAll, 2, 262144, 2.9e-3, "x"}};
  const LevelFit f = fit_level(rows, {"gpu", 2});
  EXPECT_EQ(f.sizes, 4);
  EXPECT_GT(f.bandwidth, 0);
}

}  // namespace
}  // namespace moecomm::cost

// `moecomm profile`'s microbenchmark (rt/collective_profile.h): its level layout, the rows a
// sweep returns on every rank, and that a cluster fitted from rows (cost/profile_fit.h) makes
// the simulator price each level's collectives on that fitted line.
#include "rt/collective_profile.h"

#include <gtest/gtest.h>

#include "../support/expect_error.h"
#include "sim/simulator.h"
#include "world_comm_test.h"

namespace moecomm::rt::test {
namespace {

using cost::Collective;
constexpr Collective kOps[] = {Collective::kAllToAll, Collective::kAllGather,
                               Collective::kReduceScatter, Collective::kAllReduce};

std::string layout_text(const std::vector<ProfileGroup>& groups) {
  std::string s;
  for (const ProfileGroup& g : groups) s += g.level + group_text(g.ranks) + " ";
  return s;
}

TEST(ProfileGroups, OneRankPerWorkerOutermostFirst) {
  EXPECT_EQ(layout_text(profile_groups(8, 2, 2)), "datacenter[0,4] node[0,2] gpu[0,1] ");
  EXPECT_EQ(layout_text(profile_groups(8, 2, 1)), "node[0,2,4,6] gpu[0,1] ");
  EXPECT_EQ(layout_text(profile_groups(4, 4, 1)), "gpu[0,1,2,3] ");
  EXPECT_EQ(layout_text(profile_groups(4, 1, 1)), "node[0,1,2,3] ");
  EXPECT_EQ(layout_text(profile_groups(4, 2, 2)), "datacenter[0,2] gpu[0,1] ");  // 1 node each
}

TEST(ProfileGroups, Errors) {
  EXPECT_ERROR_HAS(profile_groups(4, 3, 1), "--ranks-per-node: 3 does not divide the 4 ranks");
  EXPECT_ERROR_HAS(profile_groups(8, 2, 3), "--datacenters: 3 does not divide the 4 nodes");
  EXPECT_ERROR_HAS(profile_groups(1, 1, 1), "needs at least 2 ranks");
}

TEST(ProfileBytes, WholeFloatsPerMemberBlock) {
  EXPECT_EQ(profile_bytes(4096, 2), 4096);
  EXPECT_EQ(profile_bytes(4096, 3), 4092);  // 341 floats per member
  EXPECT_EQ(profile_bytes(1, 4), 16);       // at least one float each
}

class CollectiveProfileTest : public WorldCommTest {
 protected:
  ProfileSweep tiny_sweep(std::vector<int64_t> sizes) const {
    ProfileSweep sweep;
    sweep.sizes = std::move(sizes);
    sweep.max_iters = 2;
    sweep.warmup = 1;
    sweep.timeout_s = kTimeout;
    return sweep;
  }
};

TEST_F(CollectiveProfileTest, RowsForEveryLevelCollectiveAndSize) {
  const auto groups = profile_groups(world_size(), kRanksPerNode, 1);
  const std::vector<int64_t> sizes = {4096, 16384};
  size_t calls = 0;
  const auto rows =
      profile_collectives(groups, tiny_sweep(sizes), [&](const cost::ProfileRow&) { ++calls; });
  ASSERT_EQ(rows.size(), groups.size() * 4 * sizes.size());
  EXPECT_EQ(calls, world_rank() == 0 ? rows.size() : 0u);  // rank 0 leads every group
  size_t i = 0;
  double sum = 0;
  for (const ProfileGroup& g : groups)
    for (Collective op : kOps)
      for (int64_t s : sizes) {
        const cost::ProfileRow& r = rows[i++];
        const int n = static_cast<int>(g.ranks.size());
        EXPECT_EQ(r.level, g.level);
        EXPECT_EQ(r.op, op);
        EXPECT_EQ(r.ranks, g.level == "gpu" ? kRanksPerNode : world_size() / kRanksPerNode);
        EXPECT_EQ(r.bytes, s);
        EXPECT_GT(r.seconds, 0);
        EXPECT_EQ(r.algorithm, profile_algorithm(op, s));
        const double share = (n - 1.0) / n,
                     factor = op == Collective::kAllReduce ? 2 * share : share;
        EXPECT_DOUBLE_EQ(cost::busbw(r), cost::algbw(r) * factor);
        sum += r.seconds;
      }
  double lo = 0, hi = 0;  // every rank holds the same times
  MPI_Allreduce(&sum, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&sum, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
}

TEST_F(CollectiveProfileTest, DatacenterLevelWhenThereAreTwo) {
  const auto groups = profile_groups(world_size(), kRanksPerNode, 2);
  const auto rows = profile_collectives(groups, tiny_sweep({1024}));
  ASSERT_EQ(rows.size(), groups.size() * 4);
  EXPECT_EQ(rows.front().level, "datacenter");
  EXPECT_EQ(rows.front().ranks, 2);
  for (const cost::ProfileRow& r : rows) EXPECT_GT(r.seconds, 0) << r.level;
}

// The fitted level's link is what the simulator prices: the A2A with one latency, rings with
// one per step, on link_bytes at the fitted bandwidth, over the same representative groups.
TEST(ProfileFitInSimulator, PricesTheMeasuredCollectivesOnTheFittedLine) {
  const int world = 8, per_node = 2;
  const auto groups = profile_groups(world, per_node, 1);
  const double latency[] = {20e-6, 2e-6}, bandwidth[] = {1.25e9, 10e9};  // node, gpu
  std::vector<cost::ProfileRow> rows;
  std::vector<cost::LevelSpec> levels;
  for (size_t l = 0; l < groups.size(); ++l) {
    const int n = static_cast<int>(groups[l].ranks.size());
    levels.push_back({groups[l].level, n});
    for (Collective op : kOps)
      for (double s = 4096; s <= 1 << 24; s *= 4) {
        cost::ProfileRow r{
            groups[l].level, op, n, s, 0, profile_algorithm(op, static_cast<int64_t>(s))};
        r.seconds =
            cost::sim_latency_steps(op, n) * latency[l] + cost::link_bytes(r) / bandwidth[l];
        rows.push_back(r);
      }
  }
  const cost::ProfileFit fit = cost::fit_profile(rows, levels);
  const core::Topology topology(cost::profiled_cluster(fit, {1e12, 1e9, 1e10}, "fitted"));
  for (const cost::ProfileRow& r : rows) {
    const core::RankGroup& group = groups[r.level == "node" ? 0 : 1].ranks;
    sched::Schedule s(world);
    sched::CollectiveSpec spec;
    spec.group = group;
    if (r.op == Collective::kAllToAll) {
      spec.kind = sched::OpKind::kAllToAll;
      spec.algorithm = sched::Algorithm::kFlat;
      spec.pair_bytes.assign(group.size() * group.size(), r.bytes / r.ranks);
    } else {
      spec.kind = r.op == Collective::kAllGather       ? sched::OpKind::kAllGather
                  : r.op == Collective::kReduceScatter ? sched::OpKind::kReduceScatter
                                                       : sched::OpKind::kAllReduce;
      spec.bytes = r.bytes;
    }
    s.add_collective(spec, 0);
    EXPECT_NEAR(sim::simulate(s, topology).makespan_s, r.seconds, 1e-9 * r.seconds)
        << r.level << " " << cost::collective_name(r.op) << " " << r.bytes;
  }
}

}  // namespace
}  // namespace moecomm::rt::test

#include "place/sample_placer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

core::Topology grid_topology(int nodes, int per_node) {
  core::Cluster cluster;
  cluster.name = "test";
  cluster.levels = {{"node", nodes, 10e9, 5e-6}, {"gpu", per_node, 100e9, 1e-6}};
  return core::Topology(cluster);
}

RoutingCounts random_counts(std::mt19937_64& rng, int samples, int experts) {
  RoutingCounts num(samples, experts);
  for (auto& v : num.num) v = static_cast<int64_t>(rng() % 7) * (rng() % 3);
  return num;
}

// Every placement with two samples per device, through std::next_permutation of the
// multiset {0,0,1,1,...}.
template <class F>
void for_each_balanced_placement(int samples, int devices, F&& f) {
  std::vector<int> placement = home_placement(samples, devices);
  do f(placement);
  while (std::next_permutation(placement.begin(), placement.end()));
}

// Stage 1 reaches the least inter-node traffic of any balanced placement (Eq. 6), and
// stage 2 the least intra-node traffic among placements with the same nodes (Eq. 7).
TEST(SamplePlacer, BothStagesEqualBruteForce) {
  const core::Topology topo = grid_topology(2, 2);
  const DeviceGrid grid = DeviceGrid::of(topo);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const RoutingCounts num = random_counts(rng, 8, 6);
    const std::vector<int> experts = {0, 1, 2, 3, 0, 2};
    for (const char* solver : {"flow", "km", "ilp", "lemon-ns"}) {
      SamplePlacer placer(solver);
      const SamplePlacement p = placer.place(num, experts, grid);
      const A2ATraffic t = a2a_traffic(num, p.sample_device, experts, topo);
      EXPECT_EQ(t.inter_node(), p.inter_node_tokens);
      EXPECT_EQ(t.intra_node(), p.intra_node_tokens);
      int64_t best_inter = INT64_MAX, best_intra_same_nodes = INT64_MAX;
      for_each_balanced_placement(8, 4, [&](const std::vector<int>& q) {
        const A2ATraffic tq = a2a_traffic(num, q, experts, topo);
        best_inter = std::min(best_inter, tq.inter_node());
        bool same_nodes = true;
        for (int i = 0; i < 8; ++i) same_nodes &= q[i] / 2 == p.sample_device[i] / 2;
        if (same_nodes) best_intra_same_nodes = std::min(best_intra_same_nodes, tq.intra_node());
      });
      EXPECT_EQ(p.inter_node_tokens, best_inter) << solver;
      EXPECT_EQ(p.intra_node_tokens, best_intra_same_nodes) << solver;
      std::vector<int> per_device(4, 0);
      for (int d : p.sample_device) ++per_device[d];
      EXPECT_EQ(per_device, (std::vector<int>{2, 2, 2, 2}));
      EXPECT_GE(p.solve_us, 0.0);
    }
  }
}

TEST(SamplePlacer, StageProblemsAreEq8) {
  RoutingCounts num(1, 4);
  num.num = {3, 1, 2, 5};  // to experts on devices 0, 1, 2, 3 of a 2x2 grid
  const DeviceGrid grid{2, 2};
  const AssignmentProblem nodes = node_stage_problem(num, {0, 1, 2, 3}, grid);
  EXPECT_EQ(nodes.cost, (std::vector<int64_t>{2 + 5, 3 + 1}));  // c_{i,n}: tokens leaving n
  const AssignmentProblem devices = device_stage_problem(num, {0, 1, 2, 3}, grid, 1, {0});
  EXPECT_EQ(devices.cost, (std::vector<int64_t>{5, 2}));  // c'_{i,j}: in node, not on j
}

TEST(SamplePlacer, UnevenSampleCountsFillDevicesAsEvenlyAsPossible) {
  const DeviceGrid grid{2, 2};
  std::mt19937_64 rng(9);
  const SamplePlacement p =
      SamplePlacer("flow").place(random_counts(rng, 7, 4), {0, 1, 2, 3}, grid);
  std::vector<int> per_device(4, 0);
  for (int d : p.sample_device) ++per_device[d];
  EXPECT_EQ(per_device, (std::vector<int>{2, 2, 2, 1}));
}

TEST(SamplePlacer, RejectsBadInput) {
  const DeviceGrid grid{2, 2};
  SamplePlacer placer("flow");
  EXPECT_ERROR_HAS(placer.place(RoutingCounts(8, 4), {0, 1, 2}, grid), "expert_device",
                   "3 entries");
  EXPECT_ERROR_HAS(placer.place(RoutingCounts(8, 4), {0, 1, 2, 9}, grid), "expert_device[3]",
                   "outside [0, 4)");
  EXPECT_ERROR_HAS(placer.place(RoutingCounts(3, 4), {0, 1, 2, 3}, grid),
                   "3 samples cannot fill 4 devices");
  EXPECT_ERROR_HAS(SamplePlacer("nope"), "unknown solver 'nope'");
}

TEST(SamplePlacer, ASampleWhoseTokensPassTheSolversExactRangeIsRefused) {
  const DeviceGrid grid{2, 2};
  for (const std::string& solver : assignment_solver_names()) {
    SamplePlacer placer(solver);
    // 2 nodes of 2 devices: both stages have 8 rows at most and 2 bins.
    const int64_t limit = make_assignment_solver(solver)->max_cost(8, 2);
    RoutingCounts num(8, 4);
    num.at(5, 0) = limit - 1;
    num.at(5, 3) = 1;
    EXPECT_NO_THROW(placer.place(num, {0, 1, 2, 3}, grid)) << solver;
    num.at(5, 3) = 2;
    EXPECT_ERROR_HAS(placer.place(num, {0, 1, 2, 3}, grid), "num[5]",
                     "sum past " + std::to_string(limit), "solver " + solver);
    num.at(5, 3) = INT64_MAX;  // the sum itself would wrap
    EXPECT_ERROR_HAS(placer.place(num, {0, 1, 2, 3}, grid), "num[5]", "scale the counts down");
  }
}

}  // namespace
}  // namespace moecomm::place

#include "place/lemon_flow_solver.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "solver_cases.h"
#include "support/expect_error.h"

namespace moecomm::place {
namespace {

using Algorithm = LemonFlowSolver::Algorithm;

using testing::brute_force_optimum;
using testing::greedy_trap;

TEST(LemonFlowSolver, NamesEachAlgorithm) {
  EXPECT_EQ(LemonFlowSolver(Algorithm::kNetworkSimplex).name(), "lemon-ns");
  EXPECT_EQ(LemonFlowSolver(Algorithm::kCostScaling).name(), "lemon-cs");
  EXPECT_EQ(LemonFlowSolver(Algorithm::kCapacityScaling).name(), "lemon-cap");
}

class LemonFlowSolverAlgorithm : public ::testing::TestWithParam<Algorithm> {};

TEST_P(LemonFlowSolverAlgorithm, BeatsGreedyOnHandWorkedInstance) {
  const Assignment a = LemonFlowSolver(GetParam()).solve(greedy_trap());
  EXPECT_EQ(a.bin_of, (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(a.cost, 18);
}

TEST_P(LemonFlowSolverAlgorithm, HonoursUnequalAndZeroCapacities) {
  // Node 0 takes nobody, node 1 one sample: the one that loses least by not going to node 2
  // is sample 0 (5 - 9 = -4), so the optimum is 5 + 1 + 3 = 9.
  const AssignmentProblem p{
      .rows = 3, .bins = 3, .cost = {0, 5, 9, 0, 4, 1, 0, 7, 3}, .capacity = {0, 1, 2}};
  const Assignment a = LemonFlowSolver(GetParam()).solve(p);
  EXPECT_EQ(a.bin_of, (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(a.cost, 9);
}

TEST_P(LemonFlowSolverAlgorithm, MatchesBruteForceOnRandomSmallInstances) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> cost_of(0, 2048);
  LemonFlowSolver solver(GetParam());
  for (int trial = 0; trial < 50; ++trial) {
    AssignmentProblem p{.rows = 6, .bins = 3, .cost = {}, .capacity = {1, 2, 3}};
    for (int i = 0; i < p.rows * p.bins; ++i) p.cost.push_back(cost_of(rng));
    const Assignment a = solver.solve(p);
    EXPECT_EQ(a.cost, brute_force_optimum(p)) << "trial " << trial;
    std::vector<int> used(p.bins, 0);
    for (int b : a.bin_of) ++used[b];
    EXPECT_EQ(used, p.capacity) << "trial " << trial;
  }
}

TEST_P(LemonFlowSolverAlgorithm, SolvesTheEmptyProblem) {
  const Assignment a =
      LemonFlowSolver(GetParam()).solve({.rows = 0, .bins = 2, .cost = {}, .capacity = {0, 0}});
  EXPECT_TRUE(a.bin_of.empty());
  EXPECT_EQ(a.cost, 0);
}

TEST_P(LemonFlowSolverAlgorithm, RejectsCapacitiesThatDoNotSumToRows) {
  AssignmentProblem p = greedy_trap();
  p.capacity = {2, 1};
  EXPECT_ERROR_HAS(LemonFlowSolver(GetParam()).solve(p), "capacities sum to 3");
}

// gtest names may not contain '-', so "lemon-ns" becomes "lemon_ns".
std::string test_name(const ::testing::TestParamInfo<Algorithm>& info) {
  std::string name(LemonFlowSolver(info.param).name());
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

INSTANTIATE_TEST_SUITE_P(All, LemonFlowSolverAlgorithm,
                         ::testing::Values(Algorithm::kNetworkSimplex, Algorithm::kCostScaling,
                                           Algorithm::kCapacityScaling),
                         test_name);

}  // namespace
}  // namespace moecomm::place

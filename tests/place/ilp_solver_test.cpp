#include "place/ilp_solver.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "solver_cases.h"
#include "support/expect_error.h"

namespace moecomm::place {
namespace {

using testing::brute_force_optimum;
using testing::greedy_trap;

TEST(IlpAssignmentSolver, IsNamedIlp) {
  EXPECT_EQ(IlpAssignmentSolver().name(), "ilp");
}

TEST(IlpAssignmentSolver, BeatsGreedyOnHandWorkedInstance) {
  const Assignment a = IlpAssignmentSolver().solve(greedy_trap());
  EXPECT_EQ(a.bin_of, (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(a.cost, 18);
}

TEST(IlpAssignmentSolver, HonoursUnequalAndZeroCapacities) {
  // Node 0 takes nobody, node 1 one sample: the one that loses least by not going to node 2
  // is sample 0 (5 - 9 = -4), so the optimum is 5 + 1 + 3 = 9.
  const AssignmentProblem p{
      .rows = 3, .bins = 3, .cost = {0, 5, 9, 0, 4, 1, 0, 7, 3}, .capacity = {0, 1, 2}};
  const Assignment a = IlpAssignmentSolver().solve(p);
  EXPECT_EQ(a.bin_of, (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(a.cost, 9);
}

TEST(IlpAssignmentSolver, MatchesBruteForceOnRandomSmallInstances) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> cost_of(0, 2048);
  for (int trial = 0; trial < 20; ++trial) {
    AssignmentProblem p{.rows = 6, .bins = 3, .cost = {}, .capacity = {1, 2, 3}};
    for (int i = 0; i < p.rows * p.bins; ++i) p.cost.push_back(cost_of(rng));
    const Assignment a = IlpAssignmentSolver().solve(p);
    EXPECT_EQ(a.cost, brute_force_optimum(p)) << "trial " << trial;
    std::vector<int> used(p.bins, 0);
    for (int b : a.bin_of) ++used[b];
    EXPECT_EQ(used, p.capacity) << "trial " << trial;
  }
}

TEST(IlpAssignmentSolver, SolvesTheEmptyProblem) {
  const Assignment a =
      IlpAssignmentSolver().solve({.rows = 0, .bins = 2, .cost = {}, .capacity = {0, 0}});
  EXPECT_TRUE(a.bin_of.empty());
  EXPECT_EQ(a.cost, 0);
}

TEST(IlpAssignmentSolver, RejectsCapacitiesThatDoNotSumToRows) {
  AssignmentProblem p = greedy_trap();
  p.capacity = {2, 1};
  EXPECT_ERROR_HAS(IlpAssignmentSolver().solve(p), "capacities sum to 3");
}

TEST(IlpAssignmentSolver, PrintsNothing) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  IlpAssignmentSolver().solve(greedy_trap());
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace moecomm::place

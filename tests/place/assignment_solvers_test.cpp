// Every exact solver against brute force on small instances, and against each other on
// larger ones (NetMoE Eq. 10 instances and random ones, ties included).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "place/assignment.h"
#include "support/expect_error.h"

namespace moecomm::place {
namespace {

AssignmentProblem random_problem(std::mt19937_64& rng, int rows, int bins, int64_t max_cost,
                                 bool equal_capacity) {
  AssignmentProblem p;
  p.rows = rows;
  p.bins = bins;
  p.capacity.assign(bins, 0);
  if (equal_capacity) {
    for (int r = 0; r < rows; ++r) ++p.capacity[r % bins];
  } else {
    for (int r = 0; r < rows; ++r) ++p.capacity[rng() % bins];
  }
  p.cost.resize(static_cast<size_t>(rows) * bins);
  for (auto& c : p.cost) c = static_cast<int64_t>(rng() % (max_cost + 1));
  return p;
}

// Tries every way of filling the bins to their capacities (pruning a partial sum only when
// no cost is negative, so that it cannot come down again).
int64_t brute_force(const AssignmentProblem& p) {
  std::vector<int> left = p.capacity;
  int64_t best = INT64_MAX;
  const bool prune = std::all_of(p.cost.begin(), p.cost.end(), [](int64_t c) { return c >= 0; });
  std::function<void(int, int64_t)> go = [&](int r, int64_t sum) {
    if (prune && sum >= best) return;
    if (r == p.rows) {
      best = std::min(best, sum);
      return;
    }
    for (int b = 0; b < p.bins; ++b) {
      if (left[b] == 0) continue;
      --left[b];
      go(r + 1, sum + p.at(r, b));
      ++left[b];
    }
  };
  go(0, 0);
  return best;
}

TEST(AssignmentSolvers, EveryNameBuildsItsSolver) {
  for (const std::string& name : assignment_solver_names()) {
    EXPECT_EQ(make_assignment_solver(name)->name(), name);
  }
  EXPECT_ERROR_HAS(make_assignment_solver("greedy"), "unknown solver 'greedy'", "flow, km");
}

TEST(AssignmentSolvers, EqualBruteForceOnSmallInstances) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int bins = 1 + static_cast<int>(rng() % 4);
    const int rows = static_cast<int>(rng() % 9);
    const AssignmentProblem p = random_problem(rng, rows, bins, trial % 2 ? 3 : 100, trial % 3);
    const int64_t optimum = brute_force(p);
    for (const std::string& name : assignment_solver_names()) {
      const Assignment a = make_assignment_solver(name)->solve(p);
      ASSERT_EQ(a.cost, optimum) << name << " trial " << trial;
      ASSERT_EQ(assignment_cost(p, a.bin_of), a.cost) << name;  // feasible and honest
    }
  }
}

TEST(AssignmentSolvers, AgreeOnAThousandLargerInstances) {
  std::mt19937_64 rng(11);
  std::vector<std::unique_ptr<AssignmentSolver>> solvers;
  for (const std::string& name : assignment_solver_names()) {
    solvers.push_back(make_assignment_solver(name));
  }
  for (int trial = 0; trial < 1000; ++trial) {
    const int bins = 2 + static_cast<int>(rng() % 15);
    const int rows = bins * (1 + static_cast<int>(rng() % 6));
    // Small cost ranges make many ties, where a wrong solver most easily goes astray.
    const int64_t max_cost = trial % 4 == 0 ? 4 : 4096;
    const AssignmentProblem p = random_problem(rng, rows, bins, max_cost, trial % 5 != 0);
    const Assignment reference = solvers[0]->solve(p);
    for (size_t s = 1; s < solvers.size(); ++s) {
      const Assignment a = solvers[s]->solve(p);
      ASSERT_EQ(a.cost, reference.cost) << solvers[s]->name() << " trial " << trial;
      ASSERT_EQ(assignment_cost(p, a.bin_of), a.cost);
    }
  }
}

// Costs drawn from [-limit, limit], the whole range a solver claims to compute exactly.
AssignmentProblem edge_problem(std::mt19937_64& rng, int rows, int bins, int64_t limit) {
  AssignmentProblem p = random_problem(rng, rows, bins, 0, true);
  std::uniform_int_distribution<int64_t> cost(-limit, limit);
  for (auto& c : p.cost) c = rng() % 4 == 0 ? (rng() % 2 ? limit : -limit) : cost(rng);
  return p;
}

TEST(AssignmentSolvers, CostsPastTheExactRangeAreRefusedBeforeAnySolverRuns) {
  // Four rows of 2^61 on two bins: the optimum alone is 2^63.
  AssignmentProblem p;
  p.rows = 4;
  p.bins = 2;
  p.cost.assign(8, int64_t{1} << 61);
  p.capacity = {2, 2};
  for (const std::string& name : assignment_solver_names()) {
    EXPECT_ERROR_HAS(make_assignment_solver(name)->solve(p), "cost[0][0]: 2305843009213693952",
                     "solver " + name, "scale the costs down");
  }
  // Cost scaling multiplies by 16 (n + 1): 256 x 8 costs below 2^52 pass 2^63 there.
  std::mt19937_64 rng(5);
  p = random_problem(rng, 256, 8, (int64_t{1} << 52) - 1, true);
  const auto cs = make_assignment_solver("lemon-cs");
  const int64_t limit = cs->max_cost(256, 8);
  EXPECT_EQ(limit, (int64_t{1} << 58) / (265 * (16 + 8 * 265)));
  EXPECT_ERROR_HAS(cs->solve(p), "is outside [-" + std::to_string(limit), "solver lemon-cs");
  p.cost.assign(p.cost.size(), 0);
  p.cost.back() = -limit - 1;
  EXPECT_ERROR_HAS(cs->solve(p), "cost[255][7]: " + std::to_string(-limit - 1));
  p.cost.back() = -limit;
  EXPECT_EQ(cs->solve(p).cost, -limit);
}

TEST(AssignmentSolvers, EqualBruteForceAndEachOtherAtTheEdgeOfTheirExactRange) {
  std::mt19937_64 rng(13);
  for (const std::string& name : assignment_solver_names()) {
    const auto solver = make_assignment_solver(name);
    for (int trial = 0; trial < 30; ++trial) {
      const int bins = 1 + trial % 4, rows = trial % 9;
      const AssignmentProblem p = edge_problem(rng, rows, bins, solver->max_cost(rows, bins));
      ASSERT_EQ(solver->solve(p).cost, brute_force(p)) << name << " trial " << trial;
    }
    // NetMoE's stage-1 shape: samples on 8 nodes; the flow solver's range holds every other's.
    const auto flow = make_assignment_solver("flow");
    for (int trial = 0; trial < 3; ++trial) {
      const AssignmentProblem p = edge_problem(rng, 256, 8, solver->max_cost(256, 8));
      const Assignment a = solver->solve(p);
      ASSERT_EQ(a.cost, flow->solve(p).cost) << name << " trial " << trial;
      ASSERT_EQ(assignment_cost(p, a.bin_of), a.cost) << name;
    }
  }
}

TEST(AssignmentSolvers, SolverObjectsCanBeReused) {
  std::mt19937_64 rng(3);
  auto flow = make_assignment_solver("flow");
  auto km = make_assignment_solver("km");
  for (int trial = 0; trial < 50; ++trial) {
    const AssignmentProblem p = random_problem(rng, 8 * (1 + trial % 5), 8 - trial % 7, 50, true);
    EXPECT_EQ(flow->solve(p).cost, km->solve(p).cost);
  }
}

TEST(AssignmentProblem, RejectsInconsistentShapes) {
  AssignmentProblem p;
  p.rows = 3;
  p.bins = 2;
  p.cost.assign(6, 1);
  p.capacity = {1, 1};
  EXPECT_ERROR_HAS(p.validate(), "capacities sum to 2", "row count 3");
  p.capacity = {4, -1};
  EXPECT_ERROR_HAS(p.validate(), "negative capacity -1");
  p.capacity = {2, 1};
  p.cost.assign(5, 1);
  EXPECT_ERROR_HAS(p.validate(), "cost has 5 entries", "6");
  p.cost.assign(6, 1);
  EXPECT_NO_THROW(p.validate());
  EXPECT_ERROR_HAS(assignment_cost(p, {1, 1, 0}), "bin 1 over its capacity 1");
  EXPECT_ERROR_HAS(assignment_cost(p, {0, 2, 0}), "row 1 in bin 2");
  EXPECT_ERROR_HAS(make_assignment_solver("flow")->solve(AssignmentProblem{}), "bins >= 1");
}

}  // namespace
}  // namespace moecomm::place

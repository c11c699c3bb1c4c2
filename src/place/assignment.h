#pragma once
// The assignment problem of NetMoE's two stages (Eq. 6/10 and 7): put each of `rows` items
// (samples) into one of `bins` (nodes, or devices of a node), bin b holding exactly
// capacity[b] items, minimizing the summed integer cost. Capacities sum to rows.
// One interface, several exact solvers (LEMON's shape: one algorithm per class, run() ->
// result), so tests and benchmarks can put them side by side.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moecomm::place {

struct AssignmentProblem {
  int rows = 0;
  int bins = 0;
  std::vector<int64_t> cost;  // rows x bins, row-major: cost[r * bins + b]
  std::vector<int> capacity;  // per bin; sum == rows

  int64_t at(int r, int b) const { return cost[static_cast<size_t>(r) * bins + b]; }
  // Throws Error when shapes or capacities are inconsistent.
  void validate() const;
};

struct Assignment {
  std::vector<int> bin_of;  // per row
  int64_t cost = 0;
};

// Cost of `bin_of` under `problem`; throws Error if it breaks a capacity.
int64_t assignment_cost(const AssignmentProblem& problem, const std::vector<int>& bin_of);

class AssignmentSolver {
 public:
  virtual ~AssignmentSolver() = default;
  virtual std::string_view name() const = 0;
  // Returns an optimal assignment; throws Error for an invalid problem or one whose costs
  // pass max_cost (check), before any arithmetic on them.
  virtual Assignment solve(const AssignmentProblem& problem) = 0;
  // The largest |cost| this solver computes exactly for a problem of this size. The default
  // keeps path lengths and potentials ((rows + bins + 1) x |cost| at most) a factor 8 under
  // the solvers' 2^61 "infinity"; a solver that scales costs or sums them in doubles says less.
  virtual int64_t max_cost(int rows, int bins) const;
  // problem.validate(), then every |cost| <= max_cost: an Error naming the entry and the limit.
  void check(const AssignmentProblem& problem) const;
};

// "flow" (few-sinks successive shortest paths, the default), "km" (Kuhn-Munkres on the
// duplicated matrix, NetMoE's method), "ilp" (COIN-OR CBC), "lemon-ns", "lemon-cs",
// "lemon-cap" (LEMON NetworkSimplex, CostScaling, CapacityScaling). Throws Error otherwise.
std::unique_ptr<AssignmentSolver> make_assignment_solver(std::string_view name);
std::vector<std::string> assignment_solver_names();

}  // namespace moecomm::place

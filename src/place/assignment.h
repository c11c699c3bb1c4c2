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
  // Returns an optimal assignment; the problem must be valid.
  virtual Assignment solve(const AssignmentProblem& problem) = 0;
};

// "flow" (few-sinks successive shortest paths, the default), "km" (Kuhn-Munkres on the
// duplicated matrix, NetMoE's method), "ilp" (COIN-OR CBC), "lemon-ns", "lemon-cs",
// "lemon-cap" (LEMON NetworkSimplex, CostScaling, CapacityScaling). Throws Error otherwise.
std::unique_ptr<AssignmentSolver> make_assignment_solver(std::string_view name);
std::vector<std::string> assignment_solver_names();

}  // namespace moecomm::place

#include "place/assignment.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/optional_library.h"
#include "place/few_sinks_solver.h"
#include "place/hungarian_solver.h"
#include "place/ilp_solver.h"
#include "place/lemon_flow_solver.h"

namespace moecomm::place {

void AssignmentProblem::validate() const {
  if (rows < 0 || bins < 1) {
    throw Error("assignment problem", "needs rows >= 0 and bins >= 1, got " + std::to_string(rows) +
                                          " rows, " + std::to_string(bins) + " bins");
  }
  if (cost.size() != static_cast<size_t>(rows) * bins) {
    throw Error("assignment problem", "cost has " + std::to_string(cost.size()) +
                                          " entries, expected rows x bins = " +
                                          std::to_string(static_cast<size_t>(rows) * bins));
  }
  if (capacity.size() != static_cast<size_t>(bins)) {
    throw Error("assignment problem", "capacity has " + std::to_string(capacity.size()) +
                                          " entries, expected " + std::to_string(bins));
  }
  int64_t total = 0;
  for (int c : capacity) {
    if (c < 0) throw Error("assignment problem", "negative capacity " + std::to_string(c));
    total += c;
  }
  if (total != rows) {
    throw Error("assignment problem", "capacities sum to " + std::to_string(total) +
                                          ", expected the row count " + std::to_string(rows));
  }
}

int64_t assignment_cost(const AssignmentProblem& problem, const std::vector<int>& bin_of) {
  if (bin_of.size() != static_cast<size_t>(problem.rows)) {
    throw Error("assignment", "has " + std::to_string(bin_of.size()) + " rows, expected " +
                                  std::to_string(problem.rows));
  }
  std::vector<int> used(problem.bins, 0);
  int64_t cost = 0;
  for (int r = 0; r < problem.rows; ++r) {
    const int b = bin_of[r];
    if (b < 0 || b >= problem.bins) {
      throw Error("assignment", "row " + std::to_string(r) + " in bin " + std::to_string(b) +
                                    " outside [0, " + std::to_string(problem.bins) + ")");
    }
    if (++used[b] > problem.capacity[b]) {
      throw Error("assignment", "bin " + std::to_string(b) + " over its capacity " +
                                    std::to_string(problem.capacity[b]));
    }
    cost += problem.at(r, b);
  }
  return cost;
}

int64_t AssignmentSolver::max_cost(int rows, int bins) const {
  return (int64_t{1} << 58) / (int64_t{rows} + bins + 1);
}

void AssignmentSolver::check(const AssignmentProblem& problem) const {
  problem.validate();
  const int64_t limit = max_cost(problem.rows, problem.bins);
  for (size_t x = 0; x < problem.cost.size(); ++x) {
    const int64_t c = problem.cost[x];
    if (c >= -limit && c <= limit) continue;
    const size_t bins = static_cast<size_t>(problem.bins);
    throw Error("cost[" + std::to_string(x / bins) + "][" + std::to_string(x % bins) + "]",
                std::to_string(c) + " is outside [-" + std::to_string(limit) + ", " +
                    std::to_string(limit) + "], the costs solver " + std::string(name()) +
                    " sums exactly for " + std::to_string(problem.rows) + " rows and " +
                    std::to_string(problem.bins) + " bins: scale the costs down");
  }
}

std::vector<std::string> assignment_solver_names() {
  return {"flow", "km", "ilp", "lemon-ns", "lemon-cs", "lemon-cap"};
}

std::unique_ptr<AssignmentSolver> make_assignment_solver(std::string_view name) {
  if (name == "flow") return std::make_unique<FewSinksSolver>();
  if (name == "km") return std::make_unique<HungarianSolver>();
  // A build without CBC or LEMON (CMakeLists.txt: MOECOMM_PYTHON_ONLY) refuses their
  // solvers here, before any problem is built for them.
  if (!MOECOMM_HAVE_CBC && name == "ilp")
    throw core::missing_library("place", "solver 'ilp'", core::OptionalLibrary::kCbc);
  if (!MOECOMM_HAVE_LEMON && name.starts_with("lemon-") &&
      std::ranges::count(assignment_solver_names(), name) > 0)
    throw core::missing_library("place", "solver '" + std::string(name) + "'",
                                core::OptionalLibrary::kLemon);
  if (name == "ilp") return std::make_unique<IlpAssignmentSolver>();
  using Algorithm = LemonFlowSolver::Algorithm;
  if (name == "lemon-ns") return std::make_unique<LemonFlowSolver>(Algorithm::kNetworkSimplex);
  if (name == "lemon-cs") return std::make_unique<LemonFlowSolver>(Algorithm::kCostScaling);
  if (name == "lemon-cap") return std::make_unique<LemonFlowSolver>(Algorithm::kCapacityScaling);
  std::string known;
  for (const auto& n : assignment_solver_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("solver", "unknown solver '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace moecomm::place

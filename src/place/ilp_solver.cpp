#include "place/ilp_solver.h"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/optional_library.h"

#if MOECOMM_HAVE_CBC
#include <CbcModel.hpp>
#include <CoinMessageHandler.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#endif

namespace moecomm::place {

int64_t IlpAssignmentSolver::max_cost(int rows, int bins) const {
  return (int64_t{1} << 53) / (int64_t{rows} + bins + 1);
}

Assignment IlpAssignmentSolver::solve(const AssignmentProblem& problem) {
#if !MOECOMM_HAVE_CBC
  static_cast<void>(problem);
  throw core::missing_library("place", "solver '" + std::string(name()) + "'",
                              core::OptionalLibrary::kCbc);
#else
  check(problem);
  const int rows = problem.rows;
  const int bins = problem.bins;
  if (rows == 0) return Assignment{};
  const int columns = rows * bins;  // x_{r,b} is column r * bins + b

  // NetMoE Eq. 10: sum_b x_{r,b} = 1 for every sample r (constraint rows 0..rows-1) and
  // sum_r x_{r,b} = capacity[b] for every node b (constraint rows rows..rows+bins-1).
  // Built column-wise: column x_{r,b} has a 1 in row r and in row rows + b.
  std::vector<CoinBigIndex> column_starts(static_cast<size_t>(columns) + 1);
  std::vector<int> row_indices(2 * static_cast<size_t>(columns));
  std::vector<double> elements(2 * static_cast<size_t>(columns), 1.0);
  std::vector<int> column_lengths(static_cast<size_t>(columns), 2);
  for (int c = 0; c < columns; ++c) {
    column_starts[c] = 2 * static_cast<CoinBigIndex>(c);
    row_indices[2 * static_cast<size_t>(c)] = c / bins;
    row_indices[2 * static_cast<size_t>(c) + 1] = rows + c % bins;
  }
  column_starts[columns] = 2 * static_cast<CoinBigIndex>(columns);
  const CoinPackedMatrix matrix(/*colordered=*/true, rows + bins, columns,
                                2 * static_cast<CoinBigIndex>(columns), elements.data(),
                                row_indices.data(), column_starts.data(), column_lengths.data());

  const std::vector<double> column_lower(static_cast<size_t>(columns), 0.0);
  const std::vector<double> column_upper(static_cast<size_t>(columns), 1.0);
  std::vector<double> objective(static_cast<size_t>(columns));
  for (int c = 0; c < columns; ++c) objective[c] = static_cast<double>(problem.cost[c]);
  std::vector<double> row_bound(static_cast<size_t>(rows + bins), 1.0);
  for (int b = 0; b < bins; ++b) row_bound[rows + b] = problem.capacity[b];

  OsiClpSolverInterface lp;
  lp.messageHandler()->setLogLevel(0);
  lp.getModelPtr()->messageHandler()->setLogLevel(0);
  lp.loadProblem(matrix, column_lower.data(), column_upper.data(), objective.data(),
                 row_bound.data(), row_bound.data());
  for (int c = 0; c < columns; ++c) lp.setInteger(c);

  // CbcModel clones the solver; the clone gets its own handler, so silence it again.
  CbcModel model(lp);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);
  model.branchAndBound();
  if (!model.isProvenOptimal() || model.bestSolution() == nullptr) {
    throw std::runtime_error("ilp: CBC did not prove the assignment optimal");
  }

  const double* x = model.bestSolution();
  Assignment result;
  result.bin_of.assign(static_cast<size_t>(rows), -1);
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < bins; ++b) {
      if (std::lround(x[static_cast<size_t>(r) * bins + b]) == 1) {
        if (result.bin_of[r] != -1) {
          throw std::runtime_error("ilp: CBC put a sample into two bins");
        }
        result.bin_of[r] = b;
      }
    }
    if (result.bin_of[r] == -1) throw std::runtime_error("ilp: CBC left a sample unassigned");
  }
  result.cost = assignment_cost(problem, result.bin_of);
  return result;
#endif
}

}  // namespace moecomm::place

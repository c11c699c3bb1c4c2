#include "place/hungarian_solver.h"

#include <limits>
#include <vector>

namespace moecomm::place {

// Shortest-augmenting-path Kuhn-Munkres with row and column potentials (u, v), one row
// added per phase; 1-based with column 0 as the virtual start. Column j of the duplicated
// matrix stands for bin col_bin[j].
Assignment HungarianSolver::solve(const AssignmentProblem& problem) {
  check(problem);
  const int n = problem.rows;
  std::vector<int> col_bin(n + 1, 0);
  for (int b = 0, j = 1; b < problem.bins; ++b) {
    for (int c = 0; c < problem.capacity[b]; ++c) col_bin[j++] = b;
  }
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> u(n + 1, 0), v(n + 1, 0), min_slack(n + 1);
  std::vector<int> row_of_col(n + 1, 0), way(n + 1, 0);
  std::vector<char> used(n + 1);
  for (int row = 1; row <= n; ++row) {
    row_of_col[0] = row;
    int j0 = 0;
    std::fill(min_slack.begin(), min_slack.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const int i0 = row_of_col[j0];
      int64_t delta = kInf;
      int j1 = 0;
      for (int j = 1; j <= n; ++j) {
        if (used[j]) continue;
        const int64_t slack = problem.at(i0 - 1, col_bin[j]) - u[i0] - v[j];
        if (slack < min_slack[j]) {
          min_slack[j] = slack;
          way[j] = j0;
        }
        if (min_slack[j] < delta) {
          delta = min_slack[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= n; ++j) {
        if (used[j]) {
          u[row_of_col[j]] += delta;
          v[j] -= delta;
        } else {
          min_slack[j] -= delta;
        }
      }
      j0 = j1;
    } while (row_of_col[j0] != 0);
    do {  // flip the alternating path back to the start
      const int j1 = way[j0];
      row_of_col[j0] = row_of_col[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  Assignment result;
  result.bin_of.assign(n, 0);
  for (int j = 1; j <= n; ++j) result.bin_of[row_of_col[j] - 1] = col_bin[j];
  result.cost = assignment_cost(problem, result.bin_of);
  return result;
}

}  // namespace moecomm::place

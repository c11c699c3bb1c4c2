#pragma once
// Assignment instances shared by the solver tests: a hand-worked one where greedy is wrong,
// and the brute-force optimum of any small instance.
#include <cstdint>
#include <limits>
#include <vector>

#include "place/assignment.h"

namespace moecomm::place::testing {

// 4 samples, 2 nodes of capacity 2. Greedy (row by row, or cheapest cell first) fills node 0
// with samples 0 and 1 and pays 1 + 2 + 50 + 11 = 64; the optimum sends the two samples
// whose move to node 1 costs least (0 and 3, one unit each): 2 + 2 + 3 + 11 = 18.
inline AssignmentProblem greedy_trap() {
  return {.rows = 4, .bins = 2, .cost = {1, 2, 2, 100, 3, 50, 10, 11}, .capacity = {2, 2}};
}

// Minimum over all assignments that honour the capacities (bins^rows of them).
inline int64_t brute_force_optimum(const AssignmentProblem& p) {
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int> bin_of(p.rows, 0);
  while (true) {
    std::vector<int> used(p.bins, 0);
    bool fits = true;
    int64_t cost = 0;
    for (int r = 0; r < p.rows; ++r) {
      fits = fits && ++used[bin_of[r]] <= p.capacity[bin_of[r]];
      cost += p.at(r, bin_of[r]);
    }
    if (fits && cost < best) best = cost;
    int r = 0;
    while (r < p.rows && ++bin_of[r] == p.bins) bin_of[r++] = 0;
    if (r == p.rows) return best;
  }
}

}  // namespace moecomm::place::testing

#pragma once
// The first-stage placement of NetMoE as the paper first states it: the 0-1 ILP of Eq. 10,
// solved by a general MIP solver (COIN-OR CBC). It is the slow reference the polynomial
// solvers are measured against (NetMoE Sec. 4.4 reports the same with PuLP).
#include <string_view>

#include "place/assignment.h"

namespace moecomm::place {

class IlpAssignmentSolver final : public AssignmentSolver {
 public:
  std::string_view name() const override { return "ilp"; }
  // Throws Error for an invalid problem, std::runtime_error if CBC does not prove optimality.
  Assignment solve(const AssignmentProblem& problem) override;
  // CBC works in doubles: every sum of costs must be exact in 53 bits.
  int64_t max_cost(int rows, int bins) const override;
};

}  // namespace moecomm::place

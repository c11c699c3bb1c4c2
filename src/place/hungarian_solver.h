#pragma once
// NetMoE's solver (Sec. 3.2, Fig. 5): each bin is duplicated capacity times, giving an
// I x I matrix, and Kuhn-Munkres finds the minimum-weight perfect matching in O(I^3).
// Kept as the paper's reference; FewSinksSolver solves the same problem without the
// duplication.
#include "place/assignment.h"

namespace moecomm::place {

class HungarianSolver final : public AssignmentSolver {
 public:
  std::string_view name() const override { return "km"; }
  Assignment solve(const AssignmentProblem& problem) override;
};

}  // namespace moecomm::place

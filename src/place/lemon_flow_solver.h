#pragma once
// NetMoE Eq. 10 as a transportation problem (samples supply 1, node b demands capacity[b],
// arc sample -> node costs c_{i,n}), solved by one of LEMON's min-cost-flow algorithms.
// These are the off-the-shelf references for the project's own few-sinks solver.
#include <string_view>

#include "place/assignment.h"

namespace moecomm::place {

class LemonFlowSolver final : public AssignmentSolver {
 public:
  enum class Algorithm { kNetworkSimplex, kCostScaling, kCapacityScaling };

  explicit LemonFlowSolver(Algorithm algorithm) : algorithm_(algorithm) {}

  std::string_view name() const override;
  // Throws Error for an invalid problem, std::runtime_error if LEMON reports no optimum.
  Assignment solve(const AssignmentProblem& problem) override;
  // Cost scaling multiplies every cost by alpha N (alpha = 16, N = rows + bins + 1 nodes of
  // its residual graph) and moves potentials by up to 3 N epsilon per phase (Goldberg and
  // Tarjan), about 3.2 N^2 |cost| over all phases: |cost| N (16 + 8 N) <= 2^58 keeps scaled
  // costs, potentials and reduced costs far inside 64 bits.
  int64_t max_cost(int rows, int bins) const override;

 private:
  Algorithm algorithm_;
};

}  // namespace moecomm::place

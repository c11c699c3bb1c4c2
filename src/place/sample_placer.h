#pragma once
// NetMoE's two-stage sample placement (Sec. 3.2): stage 1 (Eq. 6/10) puts samples on nodes,
// I/N each, minimising the inter-node tokens of gather(l) + scatter(l+1); stage 2 (Eq. 7)
// puts each node's samples on its devices, I/J each, minimising intra-node tokens without
// touching stage 1. Each stage is an assignment problem solved exactly (assignment.h).
#include <memory>
#include <string_view>
#include <vector>

#include "place/assignment.h"
#include "place/routing.h"
#include "place/traffic.h"

namespace moecomm::place {

struct SamplePlacement {
  std::vector<int> sample_device;
  int64_t inter_node_tokens = 0;  // stage 1 optimum: NetMoE Eq. 10's sum of c * p
  int64_t intra_node_tokens = 0;  // stage 2 optima summed over nodes (Eq. 7)
  double solve_us = 0;            // both stages, wall clock
};

// NetMoE Eq. 8: c[i][n], the tokens of sample i that cross nodes if it sits on node n.
AssignmentProblem node_stage_problem(const RoutingCounts& num,
                                     const std::vector<int>& expert_device, const DeviceGrid& grid);
// NetMoE Eq. 8: c'[i][j] for the samples `rows` placed on `node`: the tokens that stay in
// the node but leave device j.
AssignmentProblem device_stage_problem(const RoutingCounts& num,
                                       const std::vector<int>& expert_device,
                                       const DeviceGrid& grid, int node,
                                       const std::vector<int>& rows);

class SamplePlacer {
 public:
  explicit SamplePlacer(std::string_view solver = "flow");
  std::string_view solver_name() const { return solver_->name(); }
  // num: counts of gather(l) + scatter(l+1) (one matrix: both terms are linear in it).
  // Throws Error on shape mismatches or devices outside the grid.
  SamplePlacement place(const RoutingCounts& num, const std::vector<int>& expert_device,
                        const DeviceGrid& grid);
  // What place() checks before it solves: the shapes, the devices, and each sample's total
  // tokens (a bound on its costs in both stages) within the solver's exact range
  // (AssignmentSolver::max_cost). Throws Error naming the argument and the entry.
  void check(const RoutingCounts& num, const std::vector<int>& expert_device,
             const DeviceGrid& grid) const;

 private:
  std::unique_ptr<AssignmentSolver> solver_;
};

}  // namespace moecomm::place

#include "place/sample_placer.h"

#include <chrono>
#include <string>

#include "core/error.h"

namespace moecomm::place {

namespace {

void check_inputs(const RoutingCounts& num, const std::vector<int>& expert_device,
                  const DeviceGrid& grid) {
  if (expert_device.size() != static_cast<size_t>(num.experts)) {
    throw Error("expert_device", "has " + std::to_string(expert_device.size()) +
                                     " entries, expected one per expert (" +
                                     std::to_string(num.experts) + ")");
  }
  for (size_t e = 0; e < expert_device.size(); ++e) {
    if (expert_device[e] < 0 || expert_device[e] >= grid.devices()) {
      throw Error("expert_device[" + std::to_string(e) + "]",
                  "device " + std::to_string(expert_device[e]) + " is outside [0, " +
                      std::to_string(grid.devices()) + ")");
    }
  }
  if (num.samples < grid.devices()) {
    throw Error("samples", std::to_string(num.samples) + " samples cannot fill " +
                               std::to_string(grid.devices()) + " devices");
  }
}

// Tokens of sample i to the experts of each node: row i of x[i][n].
std::vector<int64_t> tokens_to_nodes(const RoutingCounts& num,
                                     const std::vector<int>& expert_device,
                                     const DeviceGrid& grid) {
  std::vector<int64_t> x(static_cast<size_t>(num.samples) * grid.nodes, 0);
  for (int i = 0; i < num.samples; ++i) {
    for (int e = 0; e < num.experts; ++e) {
      x[static_cast<size_t>(i) * grid.nodes + grid.node_of(expert_device[e])] += num.at(i, e);
    }
  }
  return x;
}

}  // namespace

AssignmentProblem node_stage_problem(const RoutingCounts& num,
                                     const std::vector<int>& expert_device,
                                     const DeviceGrid& grid) {
  const std::vector<int64_t> x = tokens_to_nodes(num, expert_device, grid);
  AssignmentProblem problem;
  problem.rows = num.samples;
  problem.bins = grid.nodes;
  problem.cost.resize(static_cast<size_t>(num.samples) * grid.nodes);
  for (int i = 0; i < num.samples; ++i) {
    int64_t total = 0;
    for (int n = 0; n < grid.nodes; ++n) total += x[static_cast<size_t>(i) * grid.nodes + n];
    for (int n = 0; n < grid.nodes; ++n) {  // c_{i,n}: every token not bound for node n
      problem.cost[static_cast<size_t>(i) * grid.nodes + n] =
          total - x[static_cast<size_t>(i) * grid.nodes + n];
    }
  }
  const std::vector<int> per_device = device_capacities(num.samples, grid.devices());
  problem.capacity.assign(grid.nodes, 0);
  for (int d = 0; d < grid.devices(); ++d) problem.capacity[grid.node_of(d)] += per_device[d];
  return problem;
}

AssignmentProblem device_stage_problem(const RoutingCounts& num,
                                       const std::vector<int>& expert_device,
                                       const DeviceGrid& grid, int node,
                                       const std::vector<int>& rows) {
  const int first = node * grid.devices_per_node;
  AssignmentProblem problem;
  problem.rows = static_cast<int>(rows.size());
  problem.bins = grid.devices_per_node;
  problem.cost.assign(rows.size() * grid.devices_per_node, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t in_node = 0;
    std::vector<int64_t> on_device(grid.devices_per_node, 0);
    for (int e = 0; e < num.experts; ++e) {
      if (grid.node_of(expert_device[e]) != node) continue;
      in_node += num.at(rows[r], e);
      on_device[expert_device[e] - first] += num.at(rows[r], e);
    }
    for (int j = 0; j < grid.devices_per_node; ++j) {  // c'_{i,j}
      problem.cost[r * grid.devices_per_node + j] = in_node - on_device[j];
    }
  }
  const std::vector<int> per_device = device_capacities(num.samples, grid.devices());
  problem.capacity.assign(per_device.begin() + first,
                          per_device.begin() + first + grid.devices_per_node);
  return problem;
}

SamplePlacer::SamplePlacer(std::string_view solver) : solver_(make_assignment_solver(solver)) {}

SamplePlacement SamplePlacer::place(const RoutingCounts& num, const std::vector<int>& expert_device,
                                    const DeviceGrid& grid) {
  check_inputs(num, expert_device, grid);
  const auto start = std::chrono::steady_clock::now();
  SamplePlacement result;
  const Assignment nodes = solver_->solve(node_stage_problem(num, expert_device, grid));
  result.inter_node_tokens = nodes.cost;
  std::vector<std::vector<int>> rows_of_node(grid.nodes);
  for (int i = 0; i < num.samples; ++i) rows_of_node[nodes.bin_of[i]].push_back(i);
  result.sample_device.assign(num.samples, 0);
  for (int n = 0; n < grid.nodes; ++n) {
    const auto& rows = rows_of_node[n];
    const Assignment devices =
        solver_->solve(device_stage_problem(num, expert_device, grid, n, rows));
    result.intra_node_tokens += devices.cost;
    for (size_t r = 0; r < rows.size(); ++r) {
      result.sample_device[rows[r]] = n * grid.devices_per_node + devices.bin_of[r];
    }
  }
  result.solve_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace moecomm::place

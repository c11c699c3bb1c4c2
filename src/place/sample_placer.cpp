#include "place/sample_placer.h"

#include <algorithm>
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

}  // namespace

namespace {

// A run of consecutive experts [begin, end) that sit in one group (a node for stage 1, a
// device of the node for stage 2).
struct ExpertRun {
  int begin = 0, end = 0, group = 0;
};

// Both stages' costs are sums of a sample's counts over groups of experts. Experts usually
// sit in contiguous blocks, so the sums run over a few runs in tight loops; a placement at
// I = 384, E = 64 spent about half its time building costs when every count paid a division
// and stage 2 scanned all experts for every row. group_of(e) < 0 leaves e out.
template <typename GroupOf>
std::vector<ExpertRun> expert_runs(int experts, GroupOf group_of) {
  std::vector<ExpertRun> runs;
  for (int e = 0; e < experts; ++e) {
    const int g = group_of(e);
    if (g < 0) continue;
    if (!runs.empty() && runs.back().end == e && runs.back().group == g)
      ++runs.back().end;
    else
      runs.push_back({e, e + 1, g});
  }
  return runs;
}

// c[g] = (the row's tokens to every group) - (its tokens to group g), for `groups` groups.
void costs_of_row(const int64_t* row, const std::vector<ExpertRun>& runs, int groups, int64_t* c) {
  for (const ExpertRun& run : runs) {
    int64_t sum = 0;
    for (int e = run.begin; e < run.end; ++e) sum += row[e];
    c[run.group] += sum;
  }
  int64_t total = 0;
  for (int g = 0; g < groups; ++g) total += c[g];
  for (int g = 0; g < groups; ++g) c[g] = total - c[g];
}

}  // namespace

AssignmentProblem node_stage_problem(const RoutingCounts& num,
                                     const std::vector<int>& expert_device,
                                     const DeviceGrid& grid) {
  const std::vector<ExpertRun> runs =
      expert_runs(num.experts, [&](int e) { return grid.node_of(expert_device[e]); });
  AssignmentProblem problem;
  problem.rows = num.samples;
  problem.bins = grid.nodes;
  problem.cost.assign(static_cast<size_t>(num.samples) * grid.nodes, 0);
  for (int i = 0; i < num.samples; ++i) {  // c_{i,n}: every token not bound for node n
    costs_of_row(num.num.data() + static_cast<size_t>(i) * num.experts, runs, grid.nodes,
                 problem.cost.data() + static_cast<size_t>(i) * grid.nodes);
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
  const int per_node = grid.devices_per_node;
  // The node's experts by device inside the node; the others never enter c'.
  const std::vector<ExpertRun> runs = expert_runs(num.experts, [&](int e) {
    return grid.node_of(expert_device[e]) == node ? expert_device[e] - first : -1;
  });
  AssignmentProblem problem;
  problem.rows = static_cast<int>(rows.size());
  problem.bins = per_node;
  problem.cost.assign(rows.size() * per_node, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    // c'_{i,j}: the tokens that stay in the node but leave device j.
    costs_of_row(num.num.data() + static_cast<size_t>(rows[r]) * num.experts, runs, per_node,
                 problem.cost.data() + r * per_node);
  }
  const std::vector<int> per_device = device_capacities(num.samples, grid.devices());
  problem.capacity.assign(per_device.begin() + first, per_device.begin() + first + per_node);
  return problem;
}

SamplePlacer::SamplePlacer(std::string_view solver) : solver_(make_assignment_solver(solver)) {}

void SamplePlacer::check(const RoutingCounts& num, const std::vector<int>& expert_device,
                         const DeviceGrid& grid) const {
  check_inputs(num, expert_device, grid);
  // A cost of either stage counts some of a sample's tokens: the row total bounds them all.
  const int64_t limit = std::min(solver_->max_cost(num.samples, grid.nodes),
                                 solver_->max_cost(num.samples, grid.devices_per_node));
  for (int i = 0; i < num.samples; ++i) {
    int64_t total = 0;
    for (int e = 0; e < num.experts; ++e) {
      const int64_t x = num.at(i, e);
      if (x < 0 || __builtin_add_overflow(total, x, &total) || total > limit) {
        throw Error("num[" + std::to_string(i) + "]",
                    x < 0 ? "token count " + std::to_string(x) + " is negative"
                          : "the sample's tokens sum past " + std::to_string(limit) +
                                ", what solver " + std::string(solver_->name()) +
                                " sums exactly for " + std::to_string(num.samples) +
                                " samples: scale the counts down");
      }
    }
  }
}

SamplePlacement SamplePlacer::place(const RoutingCounts& num, const std::vector<int>& expert_device,
                                    const DeviceGrid& grid) {
  check(num, expert_device, grid);
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

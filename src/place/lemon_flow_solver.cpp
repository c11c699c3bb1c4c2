#include "place/lemon_flow_solver.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/optional_library.h"

#if MOECOMM_HAVE_LEMON
#include <lemon/capacity_scaling.h>
#include <lemon/cost_scaling.h>
#include <lemon/network_simplex.h>
#include <lemon/static_graph.h>

#include <stdexcept>
#include <utility>
#include <vector>

// LEMON 1.3.1 stores maps of class-typed values (here CostScaling's internal BellmanFord
// NodeMap<Arc>) in ArrayMap, which calls std::allocator::construct/destroy, removed in C++20.
// A VectorMap holds such trivially copyable handles just as well, so select it instead.
namespace lemon {
template <typename Graph, typename Item>
struct DefaultMapSelector<Graph, Item, StaticDigraphBase::Arc> {
  using Map = VectorMap<Graph, Item, StaticDigraphBase::Arc>;
};
}  // namespace lemon

namespace moecomm::place {
namespace {

using Graph = lemon::StaticDigraph;

// The network: nodes 0..rows-1 are samples, rows..rows+bins-1 are bins. Arcs are listed
// sorted by source (StaticDigraph requires it), so arc r * bins + b is sample r -> bin b.
struct Network {
  Graph graph;
  Graph::NodeMap<int> supply;
  Graph::ArcMap<int> capacity;
  Graph::ArcMap<int64_t> cost;

  explicit Network(const AssignmentProblem& problem) : supply(graph), capacity(graph), cost(graph) {
    const int rows = problem.rows;
    const int bins = problem.bins;
    std::vector<std::pair<int, int>> arcs;
    arcs.reserve(static_cast<size_t>(rows) * bins);
    for (int r = 0; r < rows; ++r) {
      for (int b = 0; b < bins; ++b) arcs.emplace_back(r, rows + b);
    }
    graph.build(rows + bins, arcs.begin(), arcs.end());
    for (int r = 0; r < rows; ++r) supply[Graph::node(r)] = 1;
    for (int b = 0; b < bins; ++b) supply[Graph::node(rows + b)] = -problem.capacity[b];
    for (int a = 0; a < rows * bins; ++a) {
      capacity[Graph::arc(a)] = 1;
      cost[Graph::arc(a)] = problem.cost[a];
    }
  }
};

// Runs one LEMON min-cost-flow algorithm and reads which bin each sample's unit went to.
template <typename MinCostFlow>
std::vector<int> solve_with(const AssignmentProblem& problem, const Network& network) {
  MinCostFlow algorithm(network.graph);
  algorithm.upperMap(network.capacity).costMap(network.cost).supplyMap(network.supply);
  if (algorithm.run() != MinCostFlow::OPTIMAL) {
    throw std::runtime_error("lemon: min-cost flow reported no optimal solution");
  }
  std::vector<int> bin_of(static_cast<size_t>(problem.rows), -1);
  for (int r = 0; r < problem.rows; ++r) {
    for (int b = 0; b < problem.bins; ++b) {
      if (algorithm.flow(Graph::arc(r * problem.bins + b)) == 1) bin_of[r] = b;
    }
    if (bin_of[r] == -1) throw std::runtime_error("lemon: a sample's unit of flow is missing");
  }
  return bin_of;
}

}  // namespace
}  // namespace moecomm::place
#endif  // MOECOMM_HAVE_LEMON

namespace moecomm::place {

std::string_view LemonFlowSolver::name() const {
  switch (algorithm_) {
    case Algorithm::kNetworkSimplex:
      return "lemon-ns";
    case Algorithm::kCostScaling:
      return "lemon-cs";
    case Algorithm::kCapacityScaling:
      return "lemon-cap";
  }
  return "lemon";
}

int64_t LemonFlowSolver::max_cost(int rows, int bins) const {
  const int64_t nodes = int64_t{rows} + bins + 1;  // LEMON's residual graph adds a root
  if (algorithm_ != Algorithm::kCostScaling) return AssignmentSolver::max_cost(rows, bins);
  const double n = static_cast<double>(nodes);  // n^2 may pass 64 bits for 2^31 rows
  return static_cast<int64_t>(0x1p58 / (n * (16 + 8 * n)));
}

Assignment LemonFlowSolver::solve(const AssignmentProblem& problem) {
#if !MOECOMM_HAVE_LEMON
  static_cast<void>(problem);
  throw core::missing_library("place", "solver '" + std::string(name()) + "'",
                              core::OptionalLibrary::kLemon);
#else
  check(problem);
  if (problem.rows == 0) return Assignment{};
  const Network network(problem);
  Assignment result;
  switch (algorithm_) {
    case Algorithm::kNetworkSimplex:
      result.bin_of = solve_with<lemon::NetworkSimplex<Graph, int, int64_t>>(problem, network);
      break;
    case Algorithm::kCostScaling:
      result.bin_of = solve_with<lemon::CostScaling<Graph, int, int64_t>>(problem, network);
      break;
    case Algorithm::kCapacityScaling:
      result.bin_of = solve_with<lemon::CapacityScaling<Graph, int, int64_t>>(problem, network);
      break;
  }
  result.cost = assignment_cost(problem, result.bin_of);
  return result;
#endif
}

}  // namespace moecomm::place

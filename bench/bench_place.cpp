// Assignment solvers side by side on NetMoE stage-1 instances (NetMoE Eq. 10): I samples onto
// N nodes of I/N samples each, cost = tokens of the sample that would cross nodes. Every
// solver is timed on the same cached instances and must reach the "flow" solver's optimum.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "place/assignment.h"

namespace {

using moecomm::place::AssignmentProblem;

constexpr int kTokensPerSample = 2048;  // T: routed tokens of one sample (seq_len x top_k)
constexpr int kSampleCounts[] = {32, 128, 384, 1024, 4096};
constexpr int kNodeCounts[] = {2, 4, 8, 16};
// Kuhn-Munkres is O(I^3) on the duplicated I x I matrix: one solve at I = 4096 took 7-50 s
// on a 2-core machine. CBC took 0.1-0.8 s there; both stop at 1024 to keep the run short.
constexpr int kSlowSolverMaxSamples = 1024;

// Routing with the data locality NetMoE observes (Sec. 1): each sample sends a random 30-70% of
// its tokens to one preferred node and scatters the rest uniformly over all nodes.
AssignmentProblem make_instance(int samples, int nodes) {
  std::mt19937_64 rng(1000003ULL * static_cast<uint64_t>(samples) + static_cast<uint64_t>(nodes));
  std::uniform_int_distribution<int> node_of(0, nodes - 1);
  std::uniform_real_distribution<double> preferred_share(0.3, 0.7);
  AssignmentProblem problem;
  problem.rows = samples;
  problem.bins = nodes;
  problem.capacity.assign(nodes, samples / nodes);
  problem.cost.reserve(static_cast<size_t>(samples) * nodes);
  std::vector<int> tokens_to_node(nodes);
  for (int i = 0; i < samples; ++i) {
    std::fill(tokens_to_node.begin(), tokens_to_node.end(), 0);
    const int preferred = node_of(rng);
    const int local = static_cast<int>(preferred_share(rng) * kTokensPerSample);
    tokens_to_node[preferred] = local;
    for (int t = local; t < kTokensPerSample; ++t) ++tokens_to_node[node_of(rng)];
    // c_{i,n} = T - num(i, n): placing sample i on node n, its other tokens cross nodes.
    for (int n = 0; n < nodes; ++n) problem.cost.push_back(kTokensPerSample - tokens_to_node[n]);
  }
  return problem;
}

// Instances are built once and shared by all solvers.
const AssignmentProblem& instance(int samples, int nodes) {
  static std::map<std::pair<int, int>, AssignmentProblem> cache;
  auto it = cache.find({samples, nodes});
  if (it == cache.end())
    it = cache.emplace(std::pair{samples, nodes}, make_instance(samples, nodes)).first;
  return it->second;
}

// Optimum of `solver` on instance (samples, nodes), solved once (the benchmark function is
// entered several times while the iteration count is calibrated).
int64_t objective(const std::string& solver, int samples, int nodes) {
  static std::map<std::tuple<std::string, int, int>, int64_t> cache;
  auto it = cache.find({solver, samples, nodes});
  if (it == cache.end()) {
    const int64_t cost =
        moecomm::place::make_assignment_solver(solver)->solve(instance(samples, nodes)).cost;
    it = cache.emplace(std::tuple{solver, samples, nodes}, cost).first;
  }
  return it->second;
}

void BM_Place(benchmark::State& state, const std::string& solver_name, int samples, int nodes) {
  const AssignmentProblem& problem = instance(samples, nodes);
  const int64_t optimum = objective(solver_name, samples, nodes);
  if (optimum != objective("flow", samples, nodes)) {
    state.SkipWithError("objective differs from flow");
    return;
  }
  auto solver = moecomm::place::make_assignment_solver(solver_name);
  for (auto _ : state) {
    auto assignment = solver->solve(problem);
    benchmark::DoNotOptimize(assignment);
  }
  state.counters["I"] = samples;
  state.counters["N"] = nodes;
  state.counters["objective"] = static_cast<double>(optimum);
}

// benchmark_main provides main(), so the (solver, I, N) grid is registered at static init.
const bool kRegistered = [] {
  for (const std::string solver : {"flow", "km", "lemon-ns", "lemon-cs", "lemon-cap", "ilp"}) {
    const bool slow = solver == "km" || solver == "ilp";
    for (int samples : kSampleCounts) {
      if (slow && samples > kSlowSolverMaxSamples) continue;
      for (int nodes : kNodeCounts) {
        const std::string name =
            "BM_Place/" + solver + "/I:" + std::to_string(samples) + "/N:" + std::to_string(nodes);
        benchmark::RegisterBenchmark(name.c_str(), BM_Place, solver, samples, nodes)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}();

}  // namespace

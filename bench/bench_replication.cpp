// Lina's replication planner (infer::plan_replication, Sec. 5.2) on Zipf-skewed popularity:
// the time of one plan (phase two re-plans on the critical path) and, as counters, the plan's
// max/mean device load beside plain EP's. Arguments: experts, devices, slots per device,
// Zipf exponent x 100.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "infer/replication_planner.h"

namespace {

// Zipf popularity over a seeded random order of the experts, summing to 1.
std::vector<double> zipf_popularity(int experts, double exponent) {
  std::mt19937_64 rng(static_cast<uint64_t>(experts) * 1000003ULL);
  std::vector<int> rank(static_cast<size_t>(experts));
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), rng);
  std::vector<double> pop;
  double sum = 0;
  for (int r : rank) sum += pop.emplace_back(1.0 / std::pow(r, exponent));
  for (double& p : pop) p /= sum;
  return pop;
}

void BM_PlanReplication(benchmark::State& state) {
  const int experts = static_cast<int>(state.range(0)), devices = static_cast<int>(state.range(1)),
            slots = static_cast<int>(state.range(2));
  const std::vector<double> pop =
      zipf_popularity(experts, static_cast<double>(state.range(3)) / 100);
  moecomm::infer::ReplicationPlan plan;
  for (auto _ : state) {
    plan = moecomm::infer::plan_replication(pop, {devices, slots});
    benchmark::DoNotOptimize(plan);
  }
  state.counters["max_over_mean"] = plan.max_over_mean;
  state.counters["ep_max_over_mean"] = plan.ep_max_over_mean;
}

BENCHMARK(BM_PlanReplication)
    ->ArgNames({"experts", "devices", "slots", "zipf_x100"})
    ->Args({8, 2, 6, 120})  // 12 slots: the exact search
    ->Args({16, 4, 4, 120})
    ->Args({16, 16, 4, 120})
    ->Args({64, 16, 8, 120})
    ->Args({256, 32, 9, 120})
    ->Args({256, 32, 16, 60})
    ->Args({256, 32, 16, 140})
    ->Args({512, 64, 16, 120})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

// Flow-level network (src/sim/flow_network.h): wall time to simulate traffic patterns of the
// issue's scales to completion. Counters: simulated seconds, flows, event batches.
//   A2A/1024: 128 nodes x 8 devices; the inter-node A2A aggregated to 128 x 127 node-pair
//     flows of multiplicity 64 (8 x 8 device pairs), plus the intra-node device pairs
//     (128 x 56 flows) at the same time. Uniform bytes finish in one batch; skewed bytes
//     (NetMoE-like uneven routing, every node pair its own size) give one event per flow in
//     one giant component, each refilling the flows at or above the ended one's share; with
//     a completion tolerance (in millionths) near-simultaneous ends share one refill.
//   Endpoints/8000: 1000 datacenters x 8 devices: intra-DC device A2A (1000 independent
//     components) with a skewed inter-DC ring of multiplicity 8 at the same time; and the
//     DC-level A2A (1000 x 999 pair flows) with uniform bytes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sim/flow_network.h"

namespace {

using moecomm::sim::FlowNetwork;

constexpr double kDeviceBandwidth = 200e9, kDeviceLatency = 3e-6;
constexpr double kNodeBandwidth = 25e9, kNodeLatency = 10e-6;
constexpr double kPairBytes = 1e6;  // one device pair's share of the A2A

// Up and down links of `count` workers of one level: ids up = first + 2i, down = up + 1.
int add_level(FlowNetwork& net, int count, double bandwidth, double latency) {
  int first = -1;
  for (int i = 0; i < count; ++i) {
    const int up = net.add_link(bandwidth, latency, "up");
    net.add_link(bandwidth, latency, "down");
    if (first < 0) first = up;
  }
  return first;
}

struct Outcome {
  double sim_time = 0;
  std::int64_t batches = 0;
};

Outcome run_to_end(FlowNetwork& net) {
  Outcome out;
  while (net.active_flows() > 0) {
    out.sim_time = net.next_event_time();
    net.advance_to(out.sim_time);
    ++out.batches;
  }
  return out;
}

// Intra-group device A2A: every ordered device pair inside each group of `per_group`.
void device_a2a(FlowNetwork& net, int dev_links, int groups, int per_group, std::int64_t& flows) {
  for (int g = 0; g < groups; ++g)
    for (int a = 0; a < per_group; ++a)
      for (int b = 0; b < per_group; ++b) {
        if (a == b) continue;
        const int da = g * per_group + a, db = g * per_group + b;
        net.start_flow({dev_links + 2 * da, dev_links + 2 * db + 1}, kPairBytes, 0.0);
        ++flows;
      }
}

void report(benchmark::State& state, const Outcome& out, std::int64_t flows) {
  state.counters["sim_ms"] = out.sim_time * 1e3;
  state.counters["flows"] = static_cast<double>(flows);
  state.counters["batches"] = static_cast<double>(out.batches);
}

void BM_A2A_1024Ranks(benchmark::State& state) {
  const bool skewed = state.range(0) != 0;
  const double tolerance = static_cast<double>(state.range(1)) * 1e-6;
  constexpr int kNodes = 128, kPerNode = 8;
  Outcome out;
  std::int64_t flows = 0;
  for (auto _ : state) {
    FlowNetwork net(tolerance);
    const int dev = add_level(net, kNodes * kPerNode, kDeviceBandwidth, kDeviceLatency);
    const int node = add_level(net, kNodes, kNodeBandwidth, kNodeLatency);
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> skew(0.5, 1.5);
    flows = 0;
    for (int i = 0; i < kNodes; ++i)
      for (int j = 0; j < kNodes; ++j) {
        if (i == j) continue;
        const double bytes = kPairBytes * (skewed ? skew(rng) : 1.0);
        net.start_flow({node + 2 * i, node + 2 * j + 1}, bytes, 0.0, kPerNode * kPerNode);
        ++flows;
      }
    device_a2a(net, dev, kNodes, kPerNode, flows);
    out = run_to_end(net);
  }
  report(state, out, flows);
}
BENCHMARK(BM_A2A_1024Ranks)
    ->ArgNames({"skewed", "tolerance_ppm"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1000})
    ->Args({1, 5000})
    ->Unit(benchmark::kMillisecond);

void BM_Endpoints8000_DeviceA2AWithDcRing(benchmark::State& state) {
  constexpr int kDcs = 1000, kPerDc = 8;
  Outcome out;
  std::int64_t flows = 0;
  for (auto _ : state) {
    FlowNetwork net;
    const int dev = add_level(net, kDcs * kPerDc, kDeviceBandwidth, kDeviceLatency);
    const int dc = add_level(net, kDcs, 12.5e9, 1e-3);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> skew(0.5, 1.5);
    flows = 0;
    device_a2a(net, dev, kDcs, kPerDc, flows);
    for (int i = 0; i < kDcs; ++i) {
      const int j = (i + 1) % kDcs;
      net.start_flow({dc + 2 * i, dc + 2 * j + 1}, 64 * kPairBytes * skew(rng), 0.0, kPerDc);
      ++flows;
    }
    out = run_to_end(net);
  }
  report(state, out, flows);
}
BENCHMARK(BM_Endpoints8000_DeviceA2AWithDcRing)->Unit(benchmark::kMillisecond);

void BM_Endpoints8000_DcA2A(benchmark::State& state) {
  constexpr int kDcs = 1000, kPerDc = 8;
  Outcome out;
  std::int64_t flows = 0;
  for (auto _ : state) {
    FlowNetwork net;
    const int dc = add_level(net, kDcs, 12.5e9, 1e-3);
    flows = 0;
    for (int i = 0; i < kDcs; ++i)
      for (int j = 0; j < kDcs; ++j) {
        if (i == j) continue;
        net.start_flow({dc + 2 * i, dc + 2 * j + 1}, kPairBytes, 0.0, kPerDc * kPerDc);
        ++flows;
      }
    out = run_to_end(net);
  }
  report(state, out, flows);
}
BENCHMARK(BM_Endpoints8000_DcA2A)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

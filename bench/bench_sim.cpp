// Simulator scale: forward and backward of one MoE layer on 1024 ranks (128 nodes of 8), and
// on 8000 ranks across 1000 datacenters, with uniform routing (every pair of an A2A carries
// the same bytes) and with routed traffic (`moecomm sim --routing synthetic`: synthetic
// routing with locality 0.9, samples at home), where every pair carries its own bytes and the
// flows of an A2A end one at a time. Each iteration builds the schedule and simulates it with
// the default SimOptions (completion tolerance included); the routing is drawn once, outside
// the timing. Counters give the simulated iteration time and the flows.
#include <benchmark/benchmark.h>

#include "core/parallel_config.h"
#include "core/topology.h"
#include "place/routed_dispatch.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace {

using namespace moecomm;

core::Cluster cluster(const std::string& name, const char* outer, int outer_count,
                      double outer_GBps, double outer_latency_us) {
  core::Cluster c;
  c.name = name;
  c.levels = {{outer, outer_count, outer_GBps * 1e9, outer_latency_us * 1e-6},
              {"gpu", 8, 200e9, 2e-6}};
  c.device = {312e12, 80e9, 2e12};
  return c;
}

core::ModelConfig model(int experts) {
  core::ModelConfig m;
  m.name = "bench-moe";
  m.hidden = 4096;
  m.ffn_hidden = 14336;
  m.experts = experts;
  m.top_k = 2;
  m.layers = 1;
  m.heads = 32;
  m.seq_len = 4096;
  m.micro_batch = 1;
  m.dtype_bytes = 2;
  m.ffn_type = core::FfnType::kSwiglu;
  return m;
}

enum class Routing { kUniform, kSynthetic };

void run(benchmark::State& state, const core::Cluster& c, int experts, const std::string& par,
         const std::string& strategy, Routing routing = Routing::kUniform,
         const sim::SimOptions& options = {}) {
  sched::LayerSetup setup;
  setup.model = model(experts);
  setup.cluster = c;
  setup.parallel = core::resolve_parallel(core::parse_parallel_spec(par, "bench"), c.world_size(),
                                          experts, "bench");
  setup.strategy = sched::parse_strategy(strategy, "bench");
  if (routing == Routing::kSynthetic) {  // as `moecomm sim --routing synthetic` builds it
    place::SyntheticRoutingSpec spec;
    spec.locality = 0.9;
    spec.layer_correlation = 0.9;
    setup.a2a_pair_bytes =
        place::routed_dispatch({setup.model, c, setup.parallel}, spec, false, "flow").matrices;
  }
  const core::Topology topology(c);
  sim::SimResult result;
  int64_t ops = 0;
  for (auto _ : state) {
    const sched::Schedule schedule = sched::build_training_step(setup);
    result = sim::simulate(schedule, topology, options);
    ops = schedule.num_ops();
  }
  state.counters["ranks"] = c.world_size();
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["flows"] = static_cast<double>(result.flows);
  state.counters["iteration_ms"] = result.makespan_s * 1e3;
}

// EP over all 1024 ranks: every A2A is 1024 x 1023 pairs, 16k node-pair flows.
void BM_Sim_1024Ranks_EP1024(benchmark::State& state) {
  run(state, cluster("128x8", "node", 128, 200, 5), 1024, "ep=1024", "baseline");
}
void BM_Sim_1024Ranks_EP1024_Routed(benchmark::State& state) {
  run(state, cluster("128x8", "node", 128, 200, 5), 1024, "ep=1024", "baseline",
      Routing::kSynthetic);
}
// The same with exact completion times (completion tolerance 0): what the tolerance buys.
void BM_Sim_1024Ranks_EP1024_Routed_Exact(benchmark::State& state) {
  sim::SimOptions exact;
  exact.completion_tolerance = 0;
  run(state, cluster("128x8", "node", 128, 200, 5), 1024, "ep=1024", "baseline",
      Routing::kSynthetic, exact);
}
// EP groups of 64 (8 nodes) with the dense AllReduce over dp = 1024.
void BM_Sim_1024Ranks_EP64_Lina(benchmark::State& state) {
  run(state, cluster("128x8", "node", 128, 200, 5), 64, "ep=64", "lina");
}
// 1000 datacenters of 8 GPUs joined by 10 Gb/s WAN links (HybridEP's scale).
void BM_Sim_8000Ranks_1000DCs_EP64(benchmark::State& state) {
  run(state, cluster("1000dc", "datacenter", 1000, 1.25, 1000), 64, "ep=64", "baseline");
}
void BM_Sim_8000Ranks_1000DCs_EP64_Routed(benchmark::State& state) {
  run(state, cluster("1000dc", "datacenter", 1000, 1.25, 1000), 64, "ep=64", "baseline",
      Routing::kSynthetic);
}
void BM_Sim_8000Ranks_1000DCs_HybridEP(benchmark::State& state) {
  run(state, cluster("1000dc", "datacenter", 1000, 1.25, 1000), 64, "ep=64", "hybridep");
}

// The same two with compute slowed while its rank communicates (overlapped_compute_share):
// the simulator retimes running compute whenever a rank's communication starts or ends.
core::Cluster slowed(core::Cluster c) {
  c.device.overlapped_compute_share = 0.8;
  return c;
}
void BM_Sim_1024Ranks_EP64_Lina_Slowed(benchmark::State& state) {
  run(state, slowed(cluster("128x8", "node", 128, 200, 5)), 64, "ep=64", "lina");
}
void BM_Sim_8000Ranks_1000DCs_HybridEP_Slowed(benchmark::State& state) {
  run(state, slowed(cluster("1000dc", "datacenter", 1000, 1.25, 1000)), 64, "ep=64", "hybridep");
}

BENCHMARK(BM_Sim_1024Ranks_EP1024)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_1024Ranks_EP1024_Routed)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_1024Ranks_EP1024_Routed_Exact)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_1024Ranks_EP64_Lina)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_8000Ranks_1000DCs_EP64)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_8000Ranks_1000DCs_EP64_Routed)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_8000Ranks_1000DCs_HybridEP)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_1024Ranks_EP64_Lina_Slowed)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Sim_8000Ranks_1000DCs_HybridEP_Slowed)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

// The optimizer step in simulation (sched/build_optimizer.h): Adam's op is priced as every
// compute op, max(flops / peak, bytes / memory bandwidth), and runs after everything else of
// its rank, so a step that ends with it is longer by exactly its time; ZeRO-1's AllGathers
// follow it; it never starts before its rank's gradient synchronization has ended.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "sched/build_optimizer.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

constexpr double kPeak = 1e14, kMemoryBandwidth = 1e12;

// free: links that take no time (latency 0, 1e30 bytes/s), so the steps differ by compute.
sched::LayerSetup setup(const std::string& strategy, bool optimizer, bool free) {
  sched::LayerSetup s;
  s.cluster.name = "2x2";
  const double bandwidth = free ? 1e30 : 1e9, latency = free ? 0 : 2e-6;
  s.cluster.levels = {{"node", 2, bandwidth, latency}, {"gpu", 2, 10 * bandwidth, latency}};
  s.cluster.device.flops = kPeak;
  s.cluster.device.memory_bandwidth = kMemoryBandwidth;
  s.model.name += "m";  // appended: assigning trips GCC 12 -O3 -Wrestrict
  s.model.hidden = 64;
  s.model.ffn_hidden = 128;
  s.model.experts = 8;
  s.model.top_k = 2;
  s.model.layers = 2;
  s.model.heads = 4;
  s.model.seq_len = 32;
  s.model.micro_batch = 2;
  s.model.dtype_bytes = 2;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=2", "-"), 4, 8, "-");
  s.strategy = sched::parse_strategy(strategy, "-");
  s.layers = 2;
  s.optimizer = optimizer;
  return s;
}

SimResult run(const sched::LayerSetup& s) {
  return simulate(sched::build_training_step(s), core::Topology(s.cluster));
}

// ep=2 on 4 ranks (dp 4, edp 2), two blocks: 2 x (4 x 64^2 + 64 x 8) = 33792 dense and
// 2 x 4 x 2 x 64 x 128 = 131072 expert parameters per rank; Adam's time on n of them.
constexpr double kDense = 33792, kExpert = 131072;
double adam_seconds(double n, double bandwidth = kMemoryBandwidth) {
  const double compute = 14 * n / kPeak;
  return bandwidth > 0 ? std::max(compute, 28 * n / bandwidth) : compute;
}

TEST(OptimizerStep, TheStepGrowsByAdamsTime) {
  for (bool free : {true, false}) {
    SCOPED_TRACE(free ? "free communication" : "priced communication");
    const SimResult without = run(setup("base=baseline", false, free));
    const SimResult with = run(setup("base=baseline", true, free));
    const double adam = adam_seconds(kDense + kExpert);
    ASSERT_EQ(adam, 28 * (kDense + kExpert) / kMemoryBandwidth);  // memory-bound
    EXPECT_NEAR(with.makespan_s - without.makespan_s, adam, 1e-12 * with.makespan_s);
    for (size_t r = 0; r < 4; ++r)
      EXPECT_NEAR(with.rank_end_s[r] - without.rank_end_s[r], adam, 1e-12 * with.makespan_s);
  }
}

// M micro-batches through the pipeline: the optimizer still ends the step, once.
TEST(OptimizerStep, AfterTheLastMicroBatch) {
  for (const std::string parallel : {"ep=2", "pp=2,ep=2"}) {
    SCOPED_TRACE(parallel);
    sched::LayerSetup without = setup("base=baseline", false, true);
    without.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "-"), 4, 8, "-");
    without.micro_batches = 4;
    sched::LayerSetup with = without;
    with.optimizer = true;
    // pp=2: each stage holds one block (dp 2, edp 1): 16896 dense and 65536 expert parameters.
    const double n = parallel == "ep=2" ? kDense + kExpert : 16896.0 + 65536;
    const SimResult a = run(without), b = run(with);
    for (size_t r = 0; r < 4; ++r)
      EXPECT_NEAR(b.rank_end_s[r] - a.rank_end_s[r], adam_seconds(n), 1e-12 * b.makespan_s);
  }
}

// With no memory bandwidth given the simulator prices flops only.
TEST(OptimizerStep, WithoutAMemoryBandwidthAdamIsItsFlops) {
  sched::LayerSetup without = setup("base=baseline", false, true), with = without;
  with.optimizer = true;
  without.cluster.device.memory_bandwidth = with.cluster.device.memory_bandwidth = 0;
  EXPECT_NEAR(run(with).makespan_s - run(without).makespan_s, adam_seconds(kDense + kExpert, 0),
              1e-12 * run(with).makespan_s);
}

// ZeRO-1 with free communication: the step grows by Adam on the shard (1/4 of the dense
// parameters, 1/2 of the experts'); its AllGathers take no time.
TEST(OptimizerStep, ZeroOneGrowsByAdamOnTheShard) {
  const SimResult without = run(setup("base=baseline", false, true));
  const SimResult zero1 = run(setup("base=baseline,zero=1", true, true));
  EXPECT_NEAR(zero1.makespan_s - without.makespan_s, adam_seconds(kDense / 4 + kExpert / 2),
              1e-9 * zero1.makespan_s);
}

// Priced communication: Adam starts only once every gradient collective of its rank has
// ended, whatever window the grad_sync knob gave them, and ZeRO-1/2's AllGathers after it.
TEST(OptimizerStep, AdamWaitsForTheRanksGradientSync) {
  for (const std::string strategy :
       {"base=baseline", "base=lina,grad_partitions=2", "base=fsmoe,grad_partitions=2",
        "base=baseline,zero=1", "base=lina,grad_partitions=2,zero=2",
        "base=fsmoe,grad_partitions=2,zero=3"}) {
    SCOPED_TRACE(strategy);
    const sched::LayerSetup s = setup(strategy, true, false);
    const sched::Schedule schedule = sched::build_training_step(s);
    const SimResult r = simulate(schedule, core::Topology(s.cluster));
    std::vector<double> adam_start(4, -1), adam_end(4, -1), synced(4, 0);
    int gathers = 0;
    for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
      const sched::OpRole role = schedule.label(id).role;
      const size_t rank = size_t(schedule.op(id).rank);
      if (role == sched::OpRole::kOptimizer) {
        adam_start[rank] = r.ops[size_t(id)].start;
        adam_end[rank] = r.ops[size_t(id)].end;
      }
      if (sched::family(role) == sched::OpFamily::kGradSync)
        synced[rank] = std::max(synced[rank], r.ops[size_t(id)].end);
    }
    for (size_t rank = 0; rank < 4; ++rank) {
      EXPECT_GT(synced[rank], 0);
      EXPECT_GE(adam_start[rank], synced[rank]);
    }
    for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
      const sched::Label& l = schedule.label(id);
      if (l.role != sched::OpRole::kZeroParamAllGather || l.phase != sched::Phase::kNone) continue;
      ++gathers;
      EXPECT_GE(r.ops[size_t(id)].start, adam_end[size_t(schedule.op(id).rank)]);
    }
    EXPECT_EQ(gathers > 0, s.strategy.zero == 1 || s.strategy.zero == 2);
  }
}

}  // namespace
}  // namespace moecomm::sim

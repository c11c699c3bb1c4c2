// A whole step of M micro-batches through p pipeline stages, priced with free communication
// (infinite bandwidth, no latency): the pipeline schedules' textbook makespans, in units of a
// stage's forward plus backward time T (Narayanan et al. 2021, Sec. 2.2): GPipe and 1F1B take
// (M + p - 1) T, interleaved 1F1B over V model chunks (M + (p - 1) / V) T; one micro-batch per
// stage with p = 1 is M T. The gradient synchronization runs once per step, whatever M.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sched/layer_builder.h"
#include "sched/pipeline_order.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

sched::LayerSetup setup(int pp, int dp, int layers, int micro_batches,
                        const std::string& strategy) {
  sched::LayerSetup s;
  s.cluster.name = "free";
  const int world = pp * dp;
  s.cluster.levels = {{"node", world, 1e30, 0}};
  s.cluster.device.flops = 1e14;
  s.cluster.device.memory_bandwidth = 1e15;
  s.model.name += "m";  // appended: assigning trips GCC 12 -O3 -Wrestrict
  s.model.hidden = 256;
  s.model.ffn_hidden = 512;
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.layers = layers;
  s.model.heads = 4;
  s.model.seq_len = 128;
  s.model.micro_batch = 2;
  s.model.dtype_bytes = 2;
  s.parallel = core::resolve_parallel(
      core::parse_parallel_spec("pp=" + std::to_string(pp) + ",ep=1", "-"), world, world, "-");
  s.strategy = sched::parse_strategy(strategy, "-");
  s.layers = layers;
  s.micro_batches = micro_batches;
  return s;
}

double makespan(const sched::LayerSetup& s) {
  const sched::Schedule schedule = sched::build_training_step(s);
  SimOptions exact;
  exact.completion_tolerance = 0;
  return simulate(schedule, core::Topology(s.cluster), exact).makespan_s;
}

// One block's forward and backward on one rank: the unit every pipeline time is counted in.
double block_time() {
  return makespan(setup(1, 1, 1, 1, "baseline"));
}

TEST(PipelineStep, MicroBatchesWithoutPipelineAddUp) {
  for (int m : {1, 2, 5})
    EXPECT_NEAR(makespan(setup(1, 1, 2, m, "baseline")), m * 2 * block_time(), 1e-12) << m;
}

TEST(PipelineStep, GpipeAnd1F1BTakeMPlusPMinusOneStageTimes) {
  const double t = block_time();
  for (const char* schedule : {"pp_schedule=gpipe", "pp_schedule=1f1b"})
    for (int p : {2, 4})
      for (int m : {1, 3, 8}) {
        const int layers = 2 * p;  // two blocks per stage: T = 2 t
        EXPECT_NEAR(makespan(setup(p, 1, layers, m, schedule)), (m + p - 1) * 2 * t, 1e-12)
            << schedule << " p=" << p << " M=" << m;
      }
}

TEST(PipelineStep, InterleavedShrinksTheBubbleByV) {
  const double t = block_time();
  for (int v : {2, 4})
    for (int p : {2, 4})
      for (int m : {p, 2 * p}) {
        const int layers = v * p;  // one block per virtual stage: T = V t
        const std::string s = "pp_schedule=interleaved:" + std::to_string(v);
        EXPECT_NEAR(makespan(setup(p, 1, layers, m, s)), (m + double(p - 1) / v) * v * t, 1e-12)
            << s << " p=" << p << " M=" << m;
      }
}

// Per role: ops and bytes over the step (gradient AllReduces: per rank, summed).
std::map<sched::OpRole, std::pair<int, double>> role_totals(const sched::Schedule& schedule) {
  std::map<sched::OpRole, std::pair<int, double>> out;
  for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
    auto& [count, bytes] = out[schedule.label(id).role];
    ++count;
    bytes += schedule.op(id).bytes;
  }
  return out;
}

TEST(PipelineStep, GradientsSynchronizeOncePerStep) {
  for (const char* strategy : {"baseline", "lina", "fsmoe"}) {
    // 8 ranks: 2 stages of dp 4, EP groups of 2, so experts reduce over edp 2.
    sched::LayerSetup one = setup(2, 4, 4, 1, strategy), four = setup(2, 4, 4, 4, strategy);
    one.parallel = four.parallel =
        core::resolve_parallel(core::parse_parallel_spec("pp=2,ep=2", "-"), 8, 4, "-");
    const auto a = role_totals(sched::build_training_step(one));
    const auto b = role_totals(sched::build_training_step(four));
    for (auto role : {sched::OpRole::kGradDenseAllReduce, sched::OpRole::kGradExpertAllReduce}) {
      ASSERT_TRUE(a.count(role)) << strategy;
      EXPECT_EQ(a.at(role), b.at(role)) << strategy << " " << sched::to_string(role);
    }
    // Everything per micro-batch is there M times: the attention and the dispatch A2As.
    EXPECT_EQ(b.at(sched::OpRole::kAttention).first, 4 * a.at(sched::OpRole::kAttention).first);
    EXPECT_EQ(b.at(sched::OpRole::kDispatchA2A).first, 4 * a.at(sched::OpRole::kDispatchA2A).first);
  }
}

// A backward begins after its forward handed its output on: the runtime finishes the
// forward's last block as it sends, so a rank's own dependencies must order the two (the
// peer stage orders them too, through the network, which a rank's threads cannot see).
TEST(PipelineStep, ABackwardWaitsForItsForwardsStageSend) {
  for (const char* schedule : {"pp_schedule=gpipe", "pp_schedule=1f1b",
                               "pp_schedule=interleaved:2,overlap_microbatches=true"})
    for (int pp : {2, 3}) {
      const sched::Schedule s = sched::build_training_step(setup(pp, 1, 2 * pp, 6, schedule));
      int receives = 0;
      for (sched::OpId id = 0; id < s.num_ops(); ++id) {
        if (s.label(id).role != sched::OpRole::kStageRecvGrads) continue;
        ++receives;
        int sends = 0;
        for (sched::OpId d : s.deps(id))
          sends += s.label(d).role == sched::OpRole::kStageSendActivations &&
                   s.op(d).rank == s.op(id).rank &&
                   s.label(d).micro_batch == s.label(id).micro_batch;
        EXPECT_EQ(sends, 1) << schedule << " pp " << pp << ": " << s.describe(id);
      }
      // Every virtual stage but the last receives gradients, once per micro-batch.
      const int chunks = std::string(schedule).find("interleaved") != std::string::npos ? 2 : 1;
      EXPECT_EQ(receives, 6 * (pp * chunks - 1)) << schedule << " pp " << pp;
    }
}

TEST(PipelineStep, StagesHoldTheirSplitOfTheLayers) {
  // 7 blocks on 3 stages: the middle takes ceil(7/3) = 3, the ends share 4.
  EXPECT_EQ(sched::split_layers(7, 3, "-"), (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(sched::split_layers(61, 16, "-").front(), 2);
  EXPECT_EQ(sched::split_layers(61, 16, "-").back(), 3);
  const sched::LayerSetup s = setup(3, 1, 7, 2, "baseline");
  const sched::Schedule schedule = sched::build_training_step(s);
  std::map<int, std::map<int, int>> blocks;  // rank -> layer -> attention ops
  for (sched::OpId id = 0; id < schedule.num_ops(); ++id)
    if (schedule.label(id).role == sched::OpRole::kAttention)
      ++blocks[schedule.op(id).rank][schedule.label(id).layer];
  const std::vector<std::vector<int>> want = {{0, 1}, {2, 3, 4}, {5, 6}};
  for (int r = 0; r < 3; ++r) {
    std::vector<int> layers;
    for (const auto& [l, n] : blocks[r]) {
      layers.push_back(l);
      EXPECT_EQ(n, 4) << "rank " << r << " layer " << l;  // 2 micro-batches x 2 phases
    }
    EXPECT_EQ(layers, want[size_t(r)]) << "rank " << r;
  }
}

// Two micro-batches' kernels on one device share it (overlap_microbatches puts them on two
// compute streams): two ops of time t each, started together, both end at 2t. A host stream's
// op (NetMoE's solve) runs beside them at its own rate.
TEST(PipelineStep, ComputeStreamsShareTheDevice) {
  core::Cluster cluster;
  cluster.name = "one";
  cluster.levels = {{"node", 1, 1e30, 0}};
  cluster.device.flops = 1e12;
  const sched::Label label{sched::OpRole::kAttention, 0, sched::Phase::kForward, -1, ""};
  sched::Schedule two(1);
  const sched::OpId a = two.add_compute(0, 0, 1e12, 0, label);
  const sched::OpId b = two.add_compute(0, 7, 1e12, 0, label);
  const SimResult r = simulate(two, core::Topology(cluster));
  EXPECT_DOUBLE_EQ(r.ops[size_t(a)].end, 2.0);
  EXPECT_DOUBLE_EQ(r.ops[size_t(b)].end, 2.0);
  sched::Schedule host(1);
  host.mark_host_stream(5);
  host.add_compute(0, 0, 1e12, 0, label);
  host.add_compute(0, 5, 1e12, 0, label);
  EXPECT_DOUBLE_EQ(simulate(host, core::Topology(cluster)).makespan_s, 1.0);
}

// Cross-micro-batch overlap on a network slow enough for the A2As to matter: one micro-batch's
// dispatch and combine run beside another's compute, so the step gets shorter; with free
// communication there is nothing to hide and 1F1B keeps its (M + p - 1) stage-times.
TEST(PipelineStep, OverlapHidesOneMicroBatchsA2AsBehindAnothersCompute) {
  const auto with_ep = [](int pp, int micro_batches, const std::string& strategy, double bw) {
    sched::LayerSetup s = setup(pp, 2, 2 * pp, micro_batches, strategy);
    s.cluster.levels = {{"node", pp * 2, bw, bw > 1e20 ? 0 : 5e-6}};
    s.cluster.device.flops = 1e12;  // a block's compute about as long as its A2As at 2 GB/s
    s.parallel = core::resolve_parallel(
        core::parse_parallel_spec("pp=" + std::to_string(pp) + ",ep=2", "-"), pp * 2, 4, "-");
    return s;
  };
  for (int pp : {1, 2}) {
    const double off = makespan(with_ep(pp, 4, "baseline", 2e9));
    const double on = makespan(with_ep(pp, 4, "overlap_microbatches=true", 2e9));
    EXPECT_LT(on, 0.95 * off) << "pp=" << pp;
    const double free_off = makespan(with_ep(pp, 4, "baseline", 1e30));
    const double free_on = makespan(with_ep(pp, 4, "overlap_microbatches=true", 1e30));
    EXPECT_NEAR(free_on, free_off, 1e-9 * free_off) << "pp=" << pp;
  }
}

}  // namespace
}  // namespace moecomm::sim

// The runtime's traffic counters per link level equal the simulator's for the same schedule
// and routing: one MoE layer forward and backward on MPI with its real routing, and
// the training-step schedule built from that routing's dispatch matrix and simulated, for
// the flat, 1DH and 2DH A2A over 2 logical nodes, under tensor parallelism (tp = 2, the schedule
// runtime) for the replicated dispatch, MoNTA O1/O2/O3 and FSMoE's pipeline (A2As, ESP
// AllGather, ReduceScatter, AllReduce and the TP AllGather), and for NetMoE's sample movement
// (the scatter from where the samples are, the gather straight to their new positions).
#include <gtest/gtest.h>

#include <iostream>

#include "core/topology.h"
#include "mpi_test_util.h"
#include "nn/moe_layer_factory.h"
#include "rt/comm_pool.h"
#include "rt/mpi_token_exchange.h"
#include "rt/scheduled_train.h"
#include "rt/train_groups.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

constexpr int kHidden = 8;

core::Cluster two_nodes(int world) {
  core::Cluster c;
  c.name = "two-nodes";
  c.levels = {{"node", 2, 1e9, 1e-6}, {"gpu", world / 2, 1e10, 1e-6}};
  c.device = {1e12, 1e10, 1e12};
  return c;
}

// A one-layer setup on two_nodes(world) with the test layer's shapes and `parallel`.
sched::LayerSetup layer_setup(int world, int experts, int heads, int seq_len, int micro_batch,
                              const std::string& parallel) {
  sched::LayerSetup setup;
  setup.cluster = two_nodes(world);
  setup.model.name = "test";
  setup.model.hidden = kHidden;
  setup.model.ffn_hidden = 12;
  setup.model.experts = experts;
  setup.model.top_k = 2;
  setup.model.layers = 1;
  setup.model.heads = heads;
  setup.model.seq_len = seq_len;
  setup.model.micro_batch = micro_batch;
  setup.model.dtype_bytes = 4;
  setup.parallel =
      core::resolve_parallel(core::parse_parallel_spec(parallel, "t"), world, experts, "t");
  return setup;
}

// The measured bytes (summed over ranks) equal the simulated ones per level, to the
// simulator's rounding (it integrates rate x time); rank 0 prints both for the note.
void expect_simulated_bytes(const int64_t* measured, const std::vector<double>& sim,
                            const std::string& what) {
  const double inter = double(measured[int(LinkLevel::kInterNode)]);
  const double intra = double(measured[int(LinkLevel::kIntraNode)]);
  EXPECT_NEAR(sim[0], inter, 1e-9 * inter);
  EXPECT_NEAR(sim[1], intra, 1e-9 * intra);
  EXPECT_GT(inter, 0);
  if (test::world_rank() == 0)
    std::cout << "np " << test::world_size() << " " << what << ": inter-node " << inter << " (sim "
              << sim[0] << "), intra-node " << intra << " (sim " << sim[1] << ")\n";
}

TEST(TrafficVsSim, RuntimeBytesByLevelEqualTheSimulatorsForTheSameRouting) {
  const int p = test::world_size(), me = test::world_rank();
  CommPool pool(MPI_COMM_WORLD, {{test::all_ranks(), 0}});
  for (sched::Algorithm a :
       {sched::Algorithm::kFlat, sched::Algorithm::k1DH, sched::Algorithm::k2DH}) {
    SCOPED_TRACE(std::string(sched::to_string(a)));
    CallOptions o;
    o.timeout_s = test::kTimeout;
    o.ranks_per_node = p / 2;
    MpiTokenExchange exchange(pool.at({test::all_ranks(), 0}), o, a);
    nn::MoeLayerSpec spec;
    spec.hidden = kHidden;
    spec.ffn_hidden = 12;
    spec.experts = 2 * p;
    spec.seed = 5;
    auto layer = nn::make_moe_layer(spec, exchange);
    layer->forward(nn::Tensor::randn({24, kHidden}, 40 + me));
    layer->backward(nn::Tensor::randn({24, kHidden}, 80 + me), 0.01f);
    int64_t measured[kNumLinkLevels] = {};
    MPI_Allreduce(exchange.bytes().bytes.data(), measured, kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
    // The dispatch matrix of this routing: rank i -> rank j, rows x row bytes.
    std::vector<int> mine = layer->layout().send_counts, all(static_cast<size_t>(p * 2 * p));
    MPI_Allgather(mine.data(), 2 * p, MPI_INT, all.data(), 2 * p, MPI_INT, MPI_COMM_WORLD);
    std::vector<double> matrix(static_cast<size_t>(p * p), 0.0);
    for (int i = 0; i < p; ++i)
      for (int e = 0; e < 2 * p; ++e)
        matrix[static_cast<size_t>(i * p + e / 2)] +=
            all[static_cast<size_t>(i * 2 * p + e)] * kHidden * sizeof(float);
    sched::LayerSetup setup = layer_setup(p, 2 * p, 1, 24, 1, "ep=" + std::to_string(p));
    setup.strategy.a2a = a;
    setup.a2a_pair_bytes = {matrix};
    const sched::Schedule schedule = sched::build_training_step(setup);
    // Only the A2As: the step's gradient AllReduce is not part of the layer run above.
    sched::Schedule a2a_only(p);
    for (int c = 0; c < schedule.num_collectives(); ++c) {
      const sched::Collective& col = schedule.collective(c);
      if (col.kind != sched::OpKind::kAllToAll) continue;
      sched::CollectiveSpec s;
      s.kind = col.kind;
      s.group = col.group;
      s.pair_bytes = col.pair_bytes;
      s.algorithm = col.algorithm;
      s.label = schedule.labels()[col.label];
      a2a_only.add_collective(s, 0);
    }
    const sim::SimResult r = sim::simulate(a2a_only, core::Topology(setup.cluster));
    expect_simulated_bytes(measured, r.bytes_by_level, std::string(sched::to_string(a)));
  }
}

// The simulated bytes by level of a schedule's token-path and HybridEP collectives: the
// step's gradient AllReduces and the dense TP AllReduce are not part of the layer run here.
std::vector<double> token_path_bytes(const sched::Schedule& schedule, const core::Cluster& c) {
  sched::Schedule only(schedule.world_size());
  for (int k = 0; k < schedule.num_collectives(); ++k) {
    const sched::Collective& col = schedule.collective(k);
    const sched::Label& label = schedule.labels()[col.label];
    const sched::OpFamily family = sched::family(label.role);  // not NetMoE's metadata
    if (family != sched::OpFamily::kTokenPath && family != sched::OpFamily::kExpertTransfer)
      continue;
    sched::CollectiveSpec s;
    s.kind = col.kind;
    s.group = col.group;
    s.bytes = col.bytes;
    s.pair_bytes = col.pair_bytes;
    s.algorithm = col.algorithm;
    s.label = label;
    only.add_collective(s, 0);
  }
  return sim::simulate(only, core::Topology(c)).bytes_by_level;
}

// One training step of the tiny model with `strategy` at `tp`, and the simulator's token-path
// bytes by level for the routing it had (the run's dispatch, and NetMoE's gather, matrices).
std::pair<TrainResult, std::vector<double>> step_and_simulation(int tp,
                                                                const std::string& strategy) {
  const int p = test::world_size();
  TrainConfig c = test::tiny_train(tp, strategy);
  c.steps = 1;
  c.keep_gradients = false;
  TrainResult run = train(c);
  sched::LayerSetup setup;
  setup.model = schedule_model(c);
  setup.parallel = train_groups(p, tp, p / tp, c.model.moe.experts, 0, "test").parallel;
  setup.cluster = two_nodes(p);
  setup.strategy = c.strategy;
  setup.layers = c.model.layers;
  setup.a2a_pair_bytes = run.dispatch_bytes;
  setup.a2a_combine_pair_bytes = run.combine_bytes;
  std::vector<double> sim = token_path_bytes(sched::build_training_step(setup), setup.cluster);
  return {std::move(run), std::move(sim)};
}

// The schedule runtime (scheduled_train.h) runs the simulator's schedule itself: one step of
// the tiny model under tp = 2, its token-path bytes by level (the MoE A2As without the layout
// counts, the ESP AllGather / ReduceScatter / AllReduce and the TP AllGather, summed over
// ranks) equal the simulator's for the routing the step had, for every TP token path. The
// A2As are flat: the layout counts are taken off at their pair's level, where a hierarchical
// A2A carries them over other hops too.
TEST(TrafficVsSim, ScheduleRuntimeTokenPathBytesEqualTheSimulatorsForTheSameRouting) {
  for (const std::string s :
       {"baseline", "monta-o1", "base=monta-o2,chunks=3", "base=monta-o3,chunks=2",
        "base=fsmoe,a2a=flat", "base=lina,chunks=2"}) {
    SCOPED_TRACE(s);
    const auto [run, sim] = step_and_simulation(2, s);
    expect_simulated_bytes(run.steps.back().a2a.bytes.data(), sim, "schedule runtime tp 2 " + s);
  }
}

// NetMoE's token rows (scatter from where the samples are, gather straight to their new
// positions, and the backward's both ways) by level equal the simulator's for the step's
// scatter and gather matrices; its counts, aux sums, targets and metadata columns are
// counted apart (a2a_meta).
TEST(TrafficVsSim, NetMoeRowBytesEqualTheSimulatorsForTheSamePlacement) {
  for (const std::string s : {"netmoe", "base=netmoe,chunks_fwd=2,chunks_bwd=3"}) {
    SCOPED_TRACE(s);
    const auto [run, sim] = step_and_simulation(1, s);
    expect_simulated_bytes(run.steps.back().a2a.bytes.data(), sim, "netmoe rows " + s);
    EXPECT_GT(run.steps.back().a2a_meta.total(), 0);
  }
}

}  // namespace
}  // namespace moecomm::rt

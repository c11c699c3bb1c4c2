// The runtime's traffic counters per link level equal the simulator's for the same schedule
// and routing (issue 6): one MoE layer forward and backward on MPI with its real routing, and
// the training-step schedule built from that routing's dispatch matrix and simulated, for
// the flat, 1DH and 2DH A2A over 2 logical nodes.
#include <gtest/gtest.h>

#include "core/topology.h"
#include "mpi_test_util.h"
#include "nn/moe_layer_factory.h"
#include "rt/comm_pool.h"
#include "rt/mpi_token_exchange.h"
#include "sched/layer_builder.h"
#include "sim/simulator.h"

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
    sched::LayerSetup setup;
    setup.cluster = two_nodes(p);
    setup.model.name = "test";
    setup.model.hidden = kHidden;
    setup.model.ffn_hidden = 12;
    setup.model.experts = 2 * p;
    setup.model.top_k = 2;
    setup.model.layers = 1;
    setup.model.heads = 1;
    setup.model.seq_len = 24;
    setup.model.micro_batch = 1;
    setup.model.dtype_bytes = 4;
    setup.parallel = core::resolve_parallel(
        core::parse_parallel_spec("ep=" + std::to_string(p), "t"), p, 2 * p, "t");
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
    // The simulator integrates rate x time, so its byte counts carry rounding.
    const double inter = double(measured[int(LinkLevel::kInterNode)]);
    const double intra = double(measured[int(LinkLevel::kIntraNode)]);
    EXPECT_NEAR(r.bytes_by_level[0], inter, 1e-9 * inter);
    EXPECT_NEAR(r.bytes_by_level[1], intra, 1e-9 * intra);
    EXPECT_GT(measured[int(LinkLevel::kInterNode)], 0);
  }
}

}  // namespace
}  // namespace moecomm::rt

// The distributed MoE layer: with EP = P ranks over MPI, every rank's
// outputs and gradients equal those of one process holding all experts (max abs difference
// 1e-5 in fp32), for every gate, both orders and both experts; and the A2A bytes the runtime
// counts equal the placement layer's traffic accounting for the same routing.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/topology.h"
#include "mpi_test_util.h"
#include "nn/bf16.h"
#include "nn/local_exchange.h"
#include "nn/moe_layer_factory.h"
#include "place/traffic.h"
#include "rt/comm_pool.h"
#include "rt/mpi_token_exchange.h"
#include "world_comm_test.h"

namespace moecomm::rt {
namespace {

using nn::GateKind;
using nn::max_abs_diff;
using nn::Tensor;

constexpr float kAuxCoef = 0.01f;
constexpr int kRanksPerNode = test::WorldCommTest::kRanksPerNode;

nn::MoeLayerSpec spec_of(GateKind gate, float capacity_factor, core::FfnType ffn_type,
                         int experts) {
  nn::MoeLayerSpec s;
  s.hidden = 8;
  s.ffn_hidden = 12;
  s.experts = experts;
  s.top_k = gate == GateKind::kSigmoid ? 1 : 2;
  s.gate = gate;
  s.ffn_type = ffn_type;
  s.capacity_factor = capacity_factor;
  s.expert_choice_capacity = 1.5f;
  s.xmoe_dim = 4;
  s.xmoe_temperature = 0.5f;
  s.seed = 7;
  return s;
}

Tensor tokens_of(int rank, uint64_t salt) {
  return Tensor::randn({9 + rank, 8}, salt + 31 * rank);
}

using MoeLayerMpi = test::WorldCommTest;

TEST_F(MoeLayerMpi, ExpertParallelEqualsOneProcessForEveryGateOrderAndExpert) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  for (GateKind gate :
       {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE, GateKind::kExpertChoice}) {
    for (float cf : {1.0f, 0.0f}) {
      for (core::FfnType ffn_type : {core::FfnType::kGelu, core::FfnType::kSwiglu}) {
        SCOPED_TRACE(::testing::Message()
                     << "gate " << int(gate) << " cf " << cf << " ffn_type " << int(ffn_type));
        const nn::MoeLayerSpec spec = spec_of(gate, cf, ffn_type, experts);
        MpiTokenExchange exchange(world(), options());
        auto layer = nn::make_moe_layer(spec, exchange);
        layer->zero_grad();
        const Tensor y = layer->forward(tokens_of(me, 100));
        const Tensor dx = layer->backward(tokens_of(me, 200), kAuxCoef);
        // One process holding every expert, run on each rank's batch in turn (every rank can
        // compute it: data and weights depend only on seeds); expert gradients add up.
        nn::LocalExchange local;
        auto ref = nn::make_moe_layer(spec, local);
        ref->zero_grad();
        Tensor ref_y, ref_dx;
        std::vector<Tensor> ref_gate;
        for (int r = 0; r < p; ++r) {
          ref->gate().zero_grad();
          Tensor yr = ref->forward(tokens_of(r, 100));
          Tensor dxr = ref->backward(tokens_of(r, 200), kAuxCoef);
          if (r != me) continue;
          ref_y = yr;
          ref_dx = dxr;
          for (const nn::Param& g : ref->gate().params()) ref_gate.push_back(*g.grad);
        }
        EXPECT_LE(max_abs_diff(y, ref_y), 1e-5f);
        EXPECT_LE(max_abs_diff(dx, ref_dx), 1e-5f);
        const auto gate_params = layer->gate().params();
        for (size_t g = 0; g < gate_params.size(); ++g)
          EXPECT_LE(max_abs_diff(*gate_params[g].grad, ref_gate[g]), 1e-5f) << gate_params[g].name;
        int compared = 0;
        for (const nn::Param& q : layer->params()) {
          if (q.name.rfind("gate.", 0) == 0) continue;
          for (const nn::Param& r : ref->params()) {
            if (r.name != q.name) continue;
            EXPECT_LE(max_abs_diff(*q.grad, *r.grad), 1e-5f) << q.name;
            ++compared;
          }
        }
        EXPECT_GT(compared, 0);  // this rank's experts were found in the reference
      }
    }
  }
}

// Dropless, so exactly the routed rows travel: the forward's dispatch and combine each move
// every rank's rows once; by level they must be NetMoE Eq. 3-4's counts of the same routing
// (samples = ranks, experts in blocks), times the row size.
TEST_F(MoeLayerMpi, AllToAllBytesEqualThePlacementTrafficAccounting) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(GateKind::kGShard, 0.0f, core::FfnType::kGelu, experts);
  MpiTokenExchange exchange(world(), options());
  auto layer = nn::make_moe_layer(spec, exchange);
  layer->forward(tokens_of(me, 100));
  // num[rank][expert] from every rank's layout.
  std::vector<int> mine = layer->layout().send_counts, all(static_cast<size_t>(p * experts));
  MPI_Allgather(mine.data(), experts, MPI_INT, all.data(), experts, MPI_INT, MPI_COMM_WORLD);
  place::RoutingCounts num(p, experts);
  for (int r = 0; r < p; ++r)
    for (int e = 0; e < experts; ++e) num.at(r, e) = all[static_cast<size_t>(r * experts + e)];
  core::Cluster cluster;
  cluster.name = "test";
  cluster.levels = {{"node", p / kRanksPerNode, 1e9, 0}, {"gpu", kRanksPerNode, 1e10, 0}};
  std::vector<int> sample_device(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) sample_device[static_cast<size_t>(r)] = r;
  const place::A2ATraffic t = place::a2a_traffic(
      num, sample_device, place::expert_blocks(experts, p), core::Topology(cluster));
  int64_t bytes[kNumLinkLevels] = {};
  MPI_Allreduce(exchange.bytes().bytes.data(), bytes, kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  const int64_t row = spec.hidden * static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(bytes[int(LinkLevel::kInterNode)], 2 * t.inter_node() * row);
  EXPECT_EQ(bytes[int(LinkLevel::kIntraNode)], 2 * t.intra_node() * row);
  EXPECT_EQ(bytes[int(LinkLevel::kSameDevice)], 2 * t.same_device * row);
  EXPECT_GT(t.inter_node(), 0);
}

// bf16 on the wire: half the bytes, and each dispatched row is the sent row rounded to
// bfloat16 (compared on the expert side through the after-dispatch hook).
TEST_F(MoeLayerMpi, Bf16ExchangeHalvesTheBytesAndRoundsTheRows) {
  const int p = test::world_size(), me = test::world_rank();
  const nn::MoeLayerSpec spec = spec_of(GateKind::kGShard, 0.0f, core::FfnType::kGelu, 2 * p);
  MpiTokenExchange fp32(world(), options()),
      bf16(world(), options(), sched::Algorithm::kFlat, true);
  auto a = nn::make_moe_layer(spec, fp32), b = nn::make_moe_layer(spec, bf16);
  Tensor got_a, got_b;
  a->hooks().after_dispatch = [&](Tensor& t) { got_a = t; };
  b->hooks().after_dispatch = [&](Tensor& t) { got_b = t; };
  a->forward(tokens_of(me, 100));
  b->forward(tokens_of(me, 100));
  nn::round_through_bf16(got_a);
  EXPECT_EQ(max_abs_diff(got_a, got_b), 0.0f);
  EXPECT_EQ(2 * bf16.bytes().total(), fp32.bytes().total());
  EXPECT_GT(fp32.bytes().total(), 0);
}

}  // namespace
}  // namespace moecomm::rt

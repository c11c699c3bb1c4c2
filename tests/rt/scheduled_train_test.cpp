// The runtime (rt/scheduled_train.h) runs the step's schedule op by op: every expert-parallel
// strategy must train like the baseline (losses at every
// step and every gradient after 3 steps within 1e-5 in fp32), over 2 logical nodes.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "../support/expect_error.h"
#include "core/error.h"
#include "mpi_test_util.h"
#include "nn/tensor.h"
#include "rt/scheduled_train.h"
#include "rt/train_loop.h"
#include "sched/a2a_routing.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

using test::expect_same_training;

TEST(ScheduledTrain, ExpertParallelStrategiesTrainLikeTheBaseline) {
  const TrainResult base = train(test::tiny_train(1, "baseline"));
  for (const std::string s : {
           "baseline",
           "hier-a2a",                                         // Tutel 2DH
           "base=baseline,a2a=1dh",                            // HetuMoE 1DH
           "base=fsmoe,tp_dispatch=replicate",                 // FSMoE r=4, windows
           "base=fsmoe,chunks_fwd=3,chunks_bwd=2",             // r apart per phase
           "lina",                                             // micro-ops
           "base=lina,a2a=2dh,chunks=3,grad_partitions=5",     //
           "base=baseline,grad_sync=fsmoe,grad_partitions=3",  //
           "base=baseline,chunks=3,pipeline_experts=false",    // experts wait for all chunks
           "base=baseline,chunks_fwd=2,chunks_bwd=4,pipeline_experts=false",
       }) {
    SCOPED_TRACE(s);
    const TrainResult run = train((test::tiny_train(1, s)));
    expect_same_training(base, run);
    const StepReport& r = run.steps.back();
    EXPECT_GT(r.a2a.total(), 0);
    EXPECT_GT(r.grad_sync.bytes, 0);
    EXPECT_GT(r.token_fwd_ms, 0.0);
    EXPECT_GE(r.synced_ms, r.token_fwd_ms);
  }
}

// recompute_experts: the MoE layers keep only their experts' input rows and recompute the
// rest in the backward; every loss and gradient is the one of the run that keeps them, to the
// bit, on every token path (pipelined chunks apart per phase, experts waiting for every chunk,
// TP, HybridEP's domains).
TEST(ScheduledTrain, RecomputedExpertsTrainBitForBitLikeKeptOnes) {
  for (const auto& [tp, s] : std::vector<std::pair<int, std::string>>{
           {1, "base=baseline"},
           {1, "base=fsmoe,tp_dispatch=replicate,chunks_fwd=3,chunks_bwd=2"},
           {1, "base=lina,chunks=2"},
           {1, "base=baseline,chunks_fwd=2,chunks_bwd=4,pipeline_experts=false"},
           {1, "base=hybridep,hybrid_domain=2,compression=1,chunks=2"},
           {2, "base=monta-o2"},
           {2, "base=baseline,chunks=2"},
       }) {
    SCOPED_TRACE(std::to_string(tp) + " " + s);
    const TrainResult kept = train(test::tiny_train(tp, s));
    const TrainConfig c = test::tiny_train(tp, s + ",recompute_experts=true");
    ASSERT_TRUE(c.strategy.recompute_experts);
    test::expect_identical_training(kept, train(c));
  }
}

// Every A2A algorithm of sched's table (sched/a2a_routing.h) trains like the baseline, chunked
// and under MoNTA's drop: a new algorithm is tested here by its table entry alone.
TEST(ScheduledTrain, EveryA2AAlgorithmTrainsLikeTheBaseline) {
  const TrainResult base = train(test::tiny_train(1, "baseline"));
  const TrainResult tp_base = train(test::tiny_train(2, "baseline"));
  for (const sched::A2AAlgorithmInfo& a : sched::a2a_algorithms()) {
    const std::string knob = ",a2a=" + std::string(a.name);
    SCOPED_TRACE(knob);
    expect_same_training(base, train(test::tiny_train(1, "base=fsmoe,chunks=2" + knob)));
    if (a.algorithm == sched::Algorithm::kDedup) continue;  // tp=1 only (executor_caps)
    expect_same_training(tp_base, train(test::tiny_train(2, "base=monta-o2,chunks=2" + knob)));
  }
}

// a2a=dedup moves a token once per node and member and applies the combine weights at the
// experts (the combine sums per token): the same training as the baseline's for every gate,
// the capacity layout's padding, node-limited routing and per-phase chunk degrees; and less
// than the plain A2A's rows across nodes.
TEST(ScheduledTrain, DedupTrainsLikeTheBaseline) {
  struct Model {
    std::string name;
    nn::GateKind gate;
    float capacity_factor;
    int router_groups, router_group_top_k;
  };
  for (const Model& m : {Model{"gshard", nn::GateKind::kGShard, 0.0f, 1, 1},
                         Model{"capacity", nn::GateKind::kGShard, 1.25f, 1, 1},
                         Model{"sigmoid node-limited", nn::GateKind::kSigmoid, 0.0f, 2, 1},
                         Model{"xmoe", nn::GateKind::kXMoE, 0.0f, 1, 1},
                         Model{"expert choice", nn::GateKind::kExpertChoice, 0.0f, 1, 1}}) {
    SCOPED_TRACE(m.name);
    const auto config = [&](const std::string& strategy) {
      TrainConfig c = test::tiny_train(1, strategy);
      c.model.moe.gate = m.gate;
      c.model.moe.capacity_factor = m.capacity_factor;
      c.model.moe.router_groups = m.router_groups;
      c.model.moe.router_group_top_k = m.router_group_top_k;
      return c;
    };
    const TrainResult base = train(config("baseline"));
    for (const std::string s :
         {"base=baseline,a2a=dedup", "base=fsmoe,a2a=dedup,chunks_fwd=3,chunks_bwd=2",
          "base=lina,a2a=dedup,chunks=2,grad_partitions=3"}) {
      SCOPED_TRACE(s);
      const TrainResult run = train(config(s));
      expect_same_training(base, run);
      if (m.gate == nn::GateKind::kGShard && m.capacity_factor == 0.0f) {
        EXPECT_LT(run.steps.back().a2a.bytes[size_t(LinkLevel::kInterNode)],
                  base.steps.back().a2a.bytes[size_t(LinkLevel::kInterNode)]);
      }
    }
  }
}

// Under tensor parallelism (tp = 2, one TP group per node): every token path the schedule
// builds, against the replicated baseline (DeepSpeed's: every TP member sends all its rows).
TEST(ScheduledTrain, TensorParallelStrategiesTrainLikeTheReplicatedBaseline) {
  const TrainResult base = train((test::tiny_train(2, "baseline")));
  for (const std::string s : {
           "baseline",                        // DeepSpeed: replicate, ESP AllReduce
           "monta-o1",                        // Drop + A2A + AllGather
           "monta-o2",                        // 4 chunks, AG beside A2A, copies after the AG
           "base=monta-o3,chunks=3",          // copies beside the next AG
           "base=monta-o2,a2a=2dh,chunks=2",  // with the 2DH A2A
           "fsmoe",                           // drop, 2DH, r=4, windows
           "base=fsmoe,grad_sync=lina",       //
           "base=lina,tp_dispatch=drop-allgather",
           "base=baseline,chunks=2",  // replicate, pipelined
       }) {
    SCOPED_TRACE(s);
    expect_same_training(base, train((test::tiny_train(2, s))));
  }
  // MoNTA's drop (Eq. 8 at t = 2): the TP members' A2As carry half the rows; the layout's
  // counts ride apart as metadata.
  const TrainResult replicate = train((test::tiny_train(2, "baseline")));
  const TrainResult drop = train((test::tiny_train(2, "monta-o1")));
  EXPECT_EQ(2 * drop.steps.back().a2a[LinkLevel::kInterNode],
            replicate.steps.back().a2a[LinkLevel::kInterNode]);
  EXPECT_GT(drop.steps.back().a2a_meta.total(), 0);
}

// HybridEP with experts sent as they are: every domain size that divides the EP group trains
// like plain EP (domain = world gathers every expert and moves no token).
TEST(ScheduledTrain, HybridEpTrainsLikeTheBaseline) {
  const TrainResult base = train(test::tiny_train(1, "baseline"));
  std::vector<std::string> exact;
  for (int domain = 2; domain <= test::world_size(); domain *= 2)
    exact.push_back("base=hybridep,hybrid_domain=" + std::to_string(domain) + ",compression=1");
  exact.push_back("base=hybridep,hybrid_domain=2,compression=1,grad_sync=lina,chunks=2");
  for (const std::string& s : exact) {
    SCOPED_TRACE(s);
    expect_same_training(base, train(test::tiny_train(1, s)));
  }
}

// Under the capacity layout and every gate: the strategies train like the baseline with the
// same layout and gate.
TEST(ScheduledTrain, CapacityLayoutAndGatesTrainLikeTheBaseline) {
  struct Case {
    float capacity;
    nn::GateKind gate;
    const char* strategy;
  };
  for (const Case& k : {Case{1.25f, nn::GateKind::kGShard, "hier-a2a"},
                        Case{1.0f, nn::GateKind::kGShard, "base=lina,chunks=2"},
                        Case{1.0f, nn::GateKind::kExpertChoice, "base=fsmoe,tp_dispatch=replicate"},
                        Case{0.0f, nn::GateKind::kSigmoid, "hier-a2a"},
                        Case{0.0f, nn::GateKind::kXMoE, "base=baseline,chunks=2"}}) {
    SCOPED_TRACE(k.strategy);
    TrainConfig base = test::tiny_train(1, "baseline");
    base.model.moe.capacity_factor = k.capacity;
    base.model.moe.gate = k.gate;
    TrainConfig c = base;
    c.strategy = sched::parse_strategy(k.strategy, "test");
    expect_same_training(train(base), train(c));
  }
}

// a2a_dtype=bf16: the A2As carry the token rows as bf16 (the layout counts as int32), so the
// token bytes are exactly half of fp32's; the rows are rounded on the wire, so the losses move,
// but by little. a2a_dtype=fp32 is the run without the knob, to the bit.
TEST(ScheduledTrain, Bf16RowsHalveTheTokenBytes) {
  for (const std::string s :
       {"baseline", "base=lina,chunks=2", "hier-a2a", "base=fsmoe,a2a=dedup"}) {
    SCOPED_TRACE(s);
    TrainConfig fp32 = test::tiny_train(1, s);
    // dedup sends a row per distinct token, so its bytes follow the routing, which the rounding
    // may change from the second layer on: one layer routes alike in both runs' first step.
    if (s.find("dedup") != std::string::npos) fp32.model.layers = 1;
    TrainConfig bf16 = fp32;
    bf16.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kBf16, core::Dtype::kBf16};
    const TrainResult a = train(fp32), b = train(bf16);
    const bool flat = s.find("hier") == std::string::npos;  // 2DH: headers on other hops too
    if (flat) {
      EXPECT_EQ(2 * b.steps[0].a2a.total(), a.steps[0].a2a.total());
    }
    EXPECT_EQ(b.steps[0].a2a_meta.total(), a.steps[0].a2a_meta.total());
    EXPECT_NE(b.steps.back().loss, a.steps.back().loss);
    EXPECT_NEAR(b.steps.back().loss, a.steps.back().loss, 1e-2);
  }
  TrainConfig fp32 = test::tiny_train(1, "baseline");
  fp32.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kFp32, core::Dtype::kFp32};
  const TrainResult plain = train(test::tiny_train(1, "baseline")), given = train(fp32);
  EXPECT_EQ(given.steps.back().loss, plain.steps.back().loss);
  EXPECT_EQ(given.steps[0].a2a.total(), plain.steps[0].a2a.total());
}

// Per direction: bf16 only on the way to the experts (the forward's dispatch, the backward's
// combine gradient) sends fewer bytes than fp32 and more than bf16 both ways, and trains apart
// from both.
TEST(ScheduledTrain, Bf16RowsRunPerDirection) {
  const TrainConfig fp32 = test::tiny_train(1, "baseline");
  TrainConfig half = fp32, both = fp32;
  half.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kBf16, core::Dtype::kFp32};
  both.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kBf16, core::Dtype::kBf16};
  const TrainResult a = train(fp32), h = train(half), b = train(both);
  EXPECT_LT(h.steps[0].a2a.total(), a.steps[0].a2a.total());
  EXPECT_GT(h.steps[0].a2a.total(), b.steps[0].a2a.total());
  EXPECT_NE(h.steps.back().loss, a.steps.back().loss);
  EXPECT_NE(h.steps.back().loss, b.steps.back().loss);
  EXPECT_NEAR(h.steps.back().loss, a.steps.back().loss, 1e-2);
}

// What the runtime cannot send is refused by the knob's name before any rank builds a
// schedule: fp8 (MPI has no fp8 type), bf16 beside TP/ESP collectives or under NetMoE.
TEST(ScheduledTrain, A2ADtypeTheRuntimeCannotSendIsRefusedByName) {
  TrainConfig c = test::tiny_train(1, "baseline");
  c.strategy = sched::parse_strategy("a2a_dtype=fp8", "test");
  EXPECT_ERROR_HAS(train(c), "strategy: a2a_dtype", "a2a_dtype=fp8", "no fp8 type");
  c.strategy = sched::parse_strategy("a2a_dtype=fp8/bf16", "test");
  EXPECT_ERROR_HAS(train(c), "strategy: a2a_dtype", "a2a_dtype=fp8/bf16", "no fp8 type");
  c = test::tiny_train(2, "monta-o1");
  c.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kBf16, core::Dtype::kBf16};
  EXPECT_ERROR_HAS(train(c), "strategy: a2a_dtype", "plain EP", "tp=2");
  c = test::tiny_train(1, "netmoe");
  c.strategy.a2a_dtype = sched::A2ADtype{core::Dtype::kBf16, core::Dtype::kBf16};
  EXPECT_ERROR_HAS(train(c), "strategy: a2a_dtype", "plain EP", "placement=netmoe");
}

}  // namespace
}  // namespace moecomm::rt

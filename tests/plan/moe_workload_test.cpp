#include "plan/moe_workload.h"

#include <gtest/gtest.h>

#include <string>

#include "core/topology.h"
#include "cost/collective_model.h"
#include "sched/layer_builder.h"

namespace moecomm::plan {
namespace {

// 2 nodes x 4 GPUs, a small MoE with 8 experts.
PlanInput input(const std::string& spec) {
  PlanInput in;
  in.cluster.name = "test-2x4";
  in.cluster.levels = {{"node", 2, 25e9, 10e-6}, {"gpu", 4, 200e9, 3e-6}};
  in.cluster.device = {312e12, 80e9, 1.6e12};
  in.model.name = "tiny-moe";
  in.model.hidden = 64;
  in.model.ffn_hidden = 128;
  in.model.experts = 8;
  in.model.top_k = 2;
  in.model.layers = 2;
  in.model.heads = 4;
  in.model.seq_len = 32;
  in.model.micro_batch = 2;
  in.model.dtype_bytes = 2;
  in.parallel = core::resolve_parallel(core::parse_parallel_spec(spec, "-"), 8, 8, "-");
  return in;
}

MoeWorkload derive(const PlanInput& in) {
  const core::Topology topo(in.cluster);
  return derive_workload(in, cost::CollectiveModel(topo));
}

// The plan's estimates price the workload the schedule runs: every quantity is the sched
// one, and the schedule's expert ops (replicated or dropped TP dispatch) run its flops.
TEST(MoeWorkload, IsTheScheduleWorkloadOnEveryLayout) {
  for (int tp : {1, 2, 4})
    for (int esp : {1, 2, 4}) {
      const std::string spec = "tp=" + std::to_string(tp) + ",esp=" + std::to_string(esp) + ",ep=2";
      const PlanInput in = input(spec);
      const MoeWorkload w = derive(in);
      const sched::LayerWorkload s = sched::layer_workload(in.model, in.parallel);
      EXPECT_EQ(w.tokens, s.tokens) << spec;
      EXPECT_EQ(w.routed_tokens, s.routed_tokens) << spec;
      EXPECT_EQ(w.token_bytes, s.token_bytes) << spec;
      EXPECT_EQ(w.a2a_bytes, s.a2a_bytes) << spec;
      EXPECT_EQ(w.attention_flops, s.attention_flops) << spec;
      EXPECT_EQ(w.expert_flops, s.expert_flops) << spec;
      EXPECT_EQ(w.dense_grad_bytes, s.dense_grad_bytes) << spec;
      EXPECT_EQ(w.expert_grad_bytes, s.expert_grad_bytes) << spec;
      EXPECT_EQ(w.experts_per_rank, 4.0) << spec;
      for (const char* strategy : {"baseline", "monta-o1"}) {
        if (esp > 1 && tp > 1 && tp % esp != 0) continue;                          // no token path
        if (std::string(strategy) == "monta-o1" && tp > 1 && tp != esp) continue;  // no drop
        sched::LayerSetup setup;
        setup.model = in.model;
        setup.parallel = in.parallel;
        setup.cluster = in.cluster;
        setup.strategy = sched::parse_strategy(strategy, "-");
        setup.layers = 1;
        const sched::Schedule step = sched::build_training_step(setup);
        int experts = 0;
        for (sched::OpId id = 0; id < step.num_ops(); ++id)
          if (step.label(id).role == sched::OpRole::kExpert &&
              step.label(id).phase == sched::Phase::kForward) {
            EXPECT_DOUBLE_EQ(step.op(id).flops, w.expert_flops) << spec << " " << strategy;
            ++experts;
          }
        EXPECT_EQ(experts, 8) << spec << " " << strategy;
      }
    }
}

// tp = 1, esp = 2: the ESP AllGather hands each rank its partner's 128 rows besides its own
// 128, on which it runs half of each expert FFN: 2 x 2 GEMMs x 256 x 64 x 64.
TEST(MoeWorkload, ExpertFlopsCountTheGatheredRows) {
  EXPECT_DOUBLE_EQ(derive(input("esp=2,ep=4")).expert_flops, 2.0 * 2 * 256 * 64 * 64);
  EXPECT_DOUBLE_EQ(derive(input("tp=2,esp=2,ep=4")).expert_flops, 2.0 * 2 * 128 * 64 * 64);
}

}  // namespace
}  // namespace moecomm::plan

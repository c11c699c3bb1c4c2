#include "sched/executor_caps.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/rank_groups.h"
#include "sched/layer_builder.h"

namespace moecomm::sched {
namespace {

constexpr Executor kRt = Executor::kRuntime, kLayer = Executor::kTorchLayer,
                   kMoving = Executor::kTorchSampleMoving;

// 2 nodes x 4 GPUs, a small MoE with 8 experts, two layers.
LayerSetup setup(const std::string& parallel, const std::string& strategy) {
  LayerSetup s;
  s.model.name = "tiny-moe";
  s.model.hidden = 64;
  s.model.ffn_hidden = 128;
  s.model.experts = 8;
  s.model.top_k = 2;
  s.model.layers = 2;
  s.model.heads = 4;
  s.model.seq_len = 32;
  s.model.micro_batch = 2;
  s.model.dtype_bytes = 2;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "-"), 8, 8, "-");
  s.cluster.name = "test-2x4";
  s.cluster.levels = {{"node", 2, 25e9, 10e-6}, {"gpu", 4, 200e9, 3e-6}};
  s.cluster.device = {312e12, 80e9, 1.6e12};
  s.strategy = parse_strategy(strategy, "-");
  s.layers = 2;
  if (s.strategy.placement == Placement::kNetMoe)  // NetMoE sizes its ops from routed matrices
    for (const core::RankGroup& ep : core::build_rank_groups(s.parallel).ep)
      s.a2a_pair_bytes.emplace_back(ep.size() * ep.size(), 1000.0);
  return s;
}

// "where: why", or "runs" where nothing is refused: readable when a test fails.
std::string text(const std::optional<Refusal>& r) {
  return r ? r->where + ": " + r->why : "runs";
}

Schedule built(const std::string& parallel, const std::string& strategy) {
  return build_training_step(setup(parallel, strategy));
}

TEST(ExecutorCaps, NamesRoundTrip) {
  for (int i = 0; i < kNumExecutors; ++i)
    EXPECT_EQ(executor_from_string(to_string(Executor(i))), Executor(i));
  EXPECT_EQ(executor_from_string("torch"), std::nullopt);
}

TEST(ExecutorCaps, PathIsReadOffTheOpsFamilies) {
  EXPECT_EQ(moe_path(built("ep=8", "fsmoe")), MoePath::kTokens);
  EXPECT_EQ(moe_path(built("ep=8", "hybridep")), MoePath::kExpertTransfer);
  EXPECT_EQ(moe_path(built("ep=8", "netmoe")), MoePath::kSamples);
  EXPECT_EQ(moe_path(built("ep=8", "base=netmoe,expert_transfer=hybrid")), MoePath::kSamples);
}

TEST(ExecutorCaps, TheRuntimeBindsTheStrategiesItTrains) {
  for (const char* name : {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe",
                           "lina", "hybridep", "netmoe"})
    EXPECT_EQ(op_refusal(built("ep=8", name), kRt), std::nullopt) << name;
  for (const char* name : {"baseline", "monta-o1", "monta-o3", "fsmoe"})
    EXPECT_EQ(op_refusal(built("tp=2,esp=2,ep=4", name), kRt), std::nullopt) << name;
}

TEST(ExecutorCaps, UnboundOpsCarryRoleLayerPhaseAndKnob) {
  const std::vector<Label> ops =
      unbound_ops(built("ep=8", "base=netmoe,expert_transfer=hybrid"), kRt);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_TRUE(ops[0] == (Label{OpRole::kExpertTransferAllGather, 0, Phase::kForward, -1, "hybrid"}))
      << to_string(ops[0]);
  EXPECT_TRUE(ops[1] ==
              (Label{OpRole::kExpertTransferGradReduceScatter, 0, Phase::kBackward, -1, "hybrid"}))
      << to_string(ops[1]);
}

TEST(ExecutorCaps, OpRefusalsNameEveryUnboundOpAndWhy) {
  EXPECT_EQ(text(op_refusal(built("ep=8", "base=netmoe,expert_transfer=hybrid"), kRt)),
            "strategy: "
            "the schedule runtime cannot bind moe.hybrid.expert_allgather [layer 0, "
            "forward, knob hybrid], moe.hybrid.grad_reducescatter [layer 0, backward, "
            "knob hybrid] (placement=netmoe moves whole samples over the EP group: no "
            "ESP split, no TP gather, no expert transfer)");
  EXPECT_EQ(text(op_refusal(built("tp=2,esp=2,ep=4", "hybridep"), kLayer)),
            "strategy: "
            "moecomm.torch.MoELayer cannot bind moe.combine.esp_allreduce [layer 0, "
            "forward, knob esp], moe.combine.esp_allreduce [layer 0, backward, knob "
            "esp] (expert_transfer=hybrid runs without ESP here (esp = 1))");
  EXPECT_EQ(text(op_refusal(built("tp=2,esp=2,ep=4", "hybridep"), kRt)),
            "strategy: "
            "the schedule runtime cannot bind moe.combine.esp_allreduce [layer 0, "
            "forward, knob esp], moe.combine.esp_allreduce [layer 0, backward, knob "
            "esp] (expert_transfer=hybrid runs on the plain EP token path: no ESP or "
            "TP collectives)");
  EXPECT_EQ(text(op_refusal(built("ep=8", "netmoe"), kLayer)),
            "strategy: "
            "moecomm.torch.MoELayer cannot bind moe.netmoe.counts_allgather [layer 0, "
            "forward, knob netmoe], moe.netmoe.aux_allgather [layer 0, forward, knob "
            "netmoe], moe.netmoe.solve [layer 0, forward, knob netmoe] "
            "(placement=netmoe moves samples: use moecomm.torch.SampleMovingMoE)");
  EXPECT_EQ(text(op_refusal(built("ep=8", "fsmoe"), kMoving)),
            "strategy: placement: "
            "has no placement=netmoe, so moecomm.torch.SampleMovingMoE binds none of "
            "its MoE ops (moecomm.torch.MoELayer runs the strategies that keep samples "
            "home)");
  EXPECT_EQ(text(op_refusal(built("ep=8", "netmoe"), kMoving)), "runs");
  EXPECT_EQ(text(op_refusal(built("ep=8", "hybridep"), kLayer)), "runs");
}

TEST(ExecutorCaps, SemanticRulesNameTheKnobAndHoldForTheExecutorsTheyBind) {
  const Strategy netmoe = parse_strategy("netmoe", "-");
  const Strategy hybrid = parse_strategy("hybridep", "-");
  RunFacts tp2;
  tp2.tp = 2;
  const Refusal netmoe_tp{"strategy: tp", "placement=netmoe runs with tp=1 only, got tp=2"};
  EXPECT_EQ(semantic_refusal(netmoe, tp2, kRt), netmoe_tp);
  EXPECT_EQ(semantic_refusal(netmoe, tp2, kMoving), netmoe_tp);
  EXPECT_EQ(
      semantic_refusal(hybrid, tp2, kRt),
      (Refusal{"strategy: tp", "expert_transfer=hybrid runs with tp=1 only for now, got tp=2"}));
  EXPECT_EQ(semantic_refusal(hybrid, tp2, kLayer), std::nullopt);  // the torch layer runs it
  RunFacts capacity;
  capacity.capacity_factor = 1.25f;
  EXPECT_EQ(semantic_refusal(netmoe, capacity, kRt),
            (Refusal{"strategy: placement",
                     "placement=netmoe inlines the expert residual, which needs the dropless "
                     "layout (capacity_factor 0, got 1.250000)"}));
  RunFacts expert_choice;
  expert_choice.token_choice_gate = false;
  const Refusal gate{"strategy: placement",
                     "placement=netmoe needs a token-choice gate, not expert choice (expert "
                     "choice drops tokens; the residual rides on each token's first slot)"};
  EXPECT_EQ(semantic_refusal(netmoe, expert_choice, kRt), gate);
  EXPECT_EQ(semantic_refusal(netmoe, expert_choice, kMoving), gate);
  EXPECT_EQ(semantic_refusal(parse_strategy("fsmoe", "-"), expert_choice, kRt), std::nullopt);
  RunFacts routing;
  routing.records_routing = true;
  EXPECT_EQ(semantic_refusal(netmoe, routing, kRt),
            (Refusal{"--record-routing", "placement=netmoe does not record routing yet"}));
  const Strategy unpipelined = parse_strategy("base=hybridep,chunks=2,pipeline_experts=false", "-");
  EXPECT_EQ(semantic_refusal(unpipelined, {}, kRt),
            (Refusal{"strategy: chunks",
                     "expert_transfer=hybrid pipelines its chunks through the experts only "
                     "(pipeline_experts=true)"}));
  EXPECT_EQ(semantic_refusal(unpipelined, {}, kLayer), std::nullopt);
  RunFacts no_cluster;
  no_cluster.cluster_given = false;
  const Strategy levels = parse_strategy("base=hybridep,hybrid_levels=2x2", "-");
  for (Executor e : {kRt, kLayer})
    EXPECT_EQ(semantic_refusal(levels, no_cluster, e),
              (Refusal{"strategy: hybrid_levels",
                       "expert_transfer=hybrid needs the cluster (--cluster) to place its "
                       "per-level domains"}));
  EXPECT_EQ(semantic_refusal(levels, {}, kRt), std::nullopt);
  const Strategy dedup = parse_strategy("a2a=dedup", "-");
  RunFacts split;
  split.tp = split.esp = 2;
  for (Executor e : {kRt, kLayer, kMoving}) {
    EXPECT_EQ(semantic_refusal(dedup, {}, e), std::nullopt);
    EXPECT_EQ(semantic_refusal(dedup, split, e),
              (Refusal{"strategy: a2a",
                       "a2a=dedup runs with tp=1 and esp=1 in the schedule runtime and "
                       "moecomm.torch (got tp=2, esp=2): its rows are reduced per token on the "
                       "way back; the simulator prices it with MoNTA's drop"}));
  }
  EXPECT_EQ(semantic_refusal(parse_strategy("a2a=dedup,a2a_dtype=bf16", "-"), {}, kRt),
            std::nullopt);
  EXPECT_EQ(semantic_refusal(parse_strategy("a2a=2dh", "-"), {}, kRt), std::nullopt);
}

// a2a_dtype: the runtime sends fp32 and bf16 rows (bf16 on the plain EP only) and refuses fp8
// by name; moecomm.torch sends fp32 only. fp32 (or no knob) runs everywhere it ran.
TEST(ExecutorCaps, A2ADtypeIsRefusedByNameWhereTheExecutorHasNoWirePath) {
  const Strategy fp8 = parse_strategy("a2a_dtype=fp8", "-");
  const Strategy deepep = parse_strategy("a2a_dtype=fp8/bf16", "-");
  const Strategy bf16 = parse_strategy("a2a_dtype=bf16", "-");
  const Strategy fp32 = parse_strategy("a2a_dtype=fp32", "-");
  EXPECT_EQ(text(semantic_refusal(fp8, {}, kRt)),
            "strategy: a2a_dtype: a2a_dtype=fp8: the schedule runtime sends token rows as fp32 "
            "or bf16 (MPI has no fp8 type); the simulator prices fp8");
  EXPECT_EQ(text(semantic_refusal(deepep, {}, kRt)),
            "strategy: a2a_dtype: a2a_dtype=fp8/bf16: the schedule runtime sends token rows as "
            "fp32 or bf16 (MPI has no fp8 type); the simulator prices fp8");
  EXPECT_EQ(semantic_refusal(bf16, {}, kRt), std::nullopt);
  EXPECT_EQ(semantic_refusal(parse_strategy("a2a_dtype=bf16/fp32", "-"), {}, kRt), std::nullopt);
  RunFacts tp2;
  tp2.tp = 2;
  EXPECT_EQ(text(semantic_refusal(bf16, tp2, kRt)),
            "strategy: a2a_dtype: a2a_dtype=bf16: bf16 token rows run on the plain EP A2A only "
            "(tp=1, no HybridEP or NetMoE), got tp=2");
  EXPECT_EQ(text(semantic_refusal(parse_strategy("base=netmoe,a2a_dtype=bf16", "-"), {}, kRt)),
            "strategy: a2a_dtype: a2a_dtype=bf16: bf16 token rows run on the plain EP A2A only "
            "(tp=1, no HybridEP or NetMoE), got tp=1, placement=netmoe");
  EXPECT_EQ(semantic_refusal(fp32, tp2, kRt), std::nullopt);
  for (Executor e : {kLayer, kMoving}) {
    for (const Strategy& s : {fp8, bf16, deepep})
      EXPECT_EQ(text(semantic_refusal(s, {}, e)),
                "strategy: a2a_dtype: a2a_dtype=" + to_string(*s.a2a_dtype) +
                    ": moecomm.torch sends token rows as fp32 (it has no bf16 wire path, and no "
                    "fp8 one: torch has no float8 dtype before 2.1); use a2a_dtype=fp32 here, "
                    "`moecomm train` for bf16, the simulator for fp8");
    EXPECT_EQ(semantic_refusal(fp32, {}, e), std::nullopt);
  }
}

TEST(ExecutorCaps, RefusalConsultsTheRulesBeforeTheOps) {
  RunFacts tp2;
  tp2.tp = 2;
  const LayerSetup s = setup("tp=2,esp=2,ep=4", "hybridep");
  EXPECT_EQ(refusal(build_training_step(s), s.strategy, tp2, kRt)->where, "strategy: tp");
  EXPECT_EQ(refusal(build_training_step(s), s.strategy, tp2, kLayer)->where, "strategy");
}

}  // namespace
}  // namespace moecomm::sched

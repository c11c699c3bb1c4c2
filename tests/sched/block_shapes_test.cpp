// Real models' block shapes in the schedule: the first dense_layers blocks with a dense FFN,
// the shared experts of the MoE blocks overlapped with the dispatch, grouped-query attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rank_groups.h"
#include "sched/layer_builder.h"
#include "sched/layer_workload.h"
#include "support/tiny_moe.h"

namespace moecomm::sched {
namespace {

// t = 2 x 32 = 64 tokens per rank without CP, h = 64, 8 experts of 128, 2 blocks.
LayerSetup setup(const core::ModelConfig& m, const std::string& parallel,
                 const std::string& strategy = "baseline") {
  LayerSetup s;
  s.model = m;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "-"), 8, m.experts, "-");
  s.cluster = testing::tiny_cluster();
  s.strategy = parse_strategy(strategy, "-");
  s.layers = static_cast<int>(m.layers);
  return s;
}

// The ops of `rank` with `role` in `layer` and `phase`, in the order added.
std::vector<OpId> ops_with(const Schedule& s, int rank, OpRole role, int layer, Phase phase) {
  std::vector<OpId> out;
  for (OpId id : s.ops_of(rank)) {
    const Label& l = s.label(id);
    if (l.role == role && l.layer == layer && l.phase == phase) out.push_back(id);
  }
  return out;
}

int count_role(const Schedule& s, OpRole role, int layer) {
  int n = 0;
  for (OpId id = 0; id < s.num_ops(); ++id)
    if (s.label(id).role == role && s.label(id).layer == layer) ++n;
  return n;
}

// Whether `later` waits, through dependencies and stream order, for `earlier`.
bool waits_for(const Schedule& s, OpId later, OpId earlier) {
  std::vector<OpId> todo = {later};
  std::set<OpId> seen;
  while (!todo.empty()) {
    const OpId id = todo.back();
    todo.pop_back();
    if (id == earlier) return true;
    if (id == kNone || id < earlier || !seen.insert(id).second) continue;
    todo.push_back(s.op(id).prev);
    for (OpId d : s.deps(id)) todo.push_back(d);
  }
  return false;
}

// The roles of `rank`'s compute stream in `layer` and `phase`, in stream order.
std::vector<OpRole> compute_roles(const Schedule& s, int rank, int layer, Phase phase) {
  std::vector<OpRole> out;
  for (OpId id : s.stream_ops(rank, kComputeStream))
    if (s.label(id).layer == layer && s.label(id).phase == phase) out.push_back(s.label(id).role);
  return out;
}

TEST(BlockShapes, ADenseBlockRunsItsFfnAndNoTokenPath) {
  core::ModelConfig m = testing::tiny_moe_model();
  m.dense_layers = 1;
  m.dense_ffn_hidden = 256;
  m.ffn_type = core::FfnType::kSwiglu;
  // tp 2 x dp 4; esp 1, ep 4, edp 2: both blocks' dense and block 1's expert gradients travel.
  const Schedule s = build_training_step(setup(m, "tp=2,esp=1,ep=4"));
  EXPECT_NO_THROW(s.validate());
  // Block 0 is dense: no gate, no A2A, no expert, no ESP collective, no expert gradients.
  for (OpRole role :
       {OpRole::kGate, OpRole::kDispatchA2A, OpRole::kCombineA2A, OpRole::kExpert,
        OpRole::kDispatchEspAllGather, OpRole::kCombineEspAllReduce,
        OpRole::kCombineEspReduceScatter, OpRole::kGradExpertAllReduce, OpRole::kSharedExpert})
    EXPECT_EQ(count_role(s, role, 0), 0) << to_string(role);
  // Block 1 is the MoE block it was: no dense FFN.
  EXPECT_EQ(count_role(s, OpRole::kDenseFfn, 1), 0);
  EXPECT_EQ(count_role(s, OpRole::kDenseFfnTpAllReduce, 1), 0);
  EXPECT_GT(count_role(s, OpRole::kDispatchA2A, 1), 0);
  EXPECT_GT(count_role(s, OpRole::kGradExpertAllReduce, 1), 0);
  for (int r = 0; r < 8; ++r) {
    // 2 t h f_dense x 3 GEMMs / tp = 2 x 64 x 64 x 256 x 3 / 2, twice that backward.
    const auto fwd = ops_with(s, r, OpRole::kDenseFfn, 0, Phase::kForward);
    const auto bwd = ops_with(s, r, OpRole::kDenseFfn, 0, Phase::kBackward);
    ASSERT_EQ(fwd.size(), 1u);
    ASSERT_EQ(bwd.size(), 1u);
    EXPECT_EQ(s.op(fwd[0]).flops, 3145728.0);
    EXPECT_EQ(s.op(bwd[0]).flops, 6291456.0);
    EXPECT_EQ(compute_roles(s, r, 0, Phase::kForward),
              (std::vector<OpRole>{OpRole::kAttention, OpRole::kDenseFfn}));
    EXPECT_EQ(compute_roles(s, r, 0, Phase::kBackward),
              (std::vector<OpRole>{OpRole::kDenseFfn, OpRole::kAttention}));
    // Megatron's MLP: the TP AllReduce of t x h x 2 bytes after the FFN, both phases.
    for (Phase phase : {Phase::kForward, Phase::kBackward}) {
      const auto ar = ops_with(s, r, OpRole::kDenseFfnTpAllReduce, 0, phase);
      ASSERT_EQ(ar.size(), 1u);
      EXPECT_EQ(s.op(ar[0]).kind, OpKind::kAllReduce);
      EXPECT_EQ(s.op(ar[0]).stream, kTokenStream);
      EXPECT_EQ(s.op(ar[0]).bytes, 8192.0);
      const OpId ffn = phase == Phase::kForward ? fwd[0] : bwd[0];
      EXPECT_TRUE(waits_for(s, ar[0], ffn));
    }
    // Dense gradients: block 0 (4 h^2 + 3 h f_dense) / tp x 2 bytes, block 1 (4 h^2 / tp +
    // h E) x 2 bytes; only block 1 has expert gradients.
    const auto g0 = ops_with(s, r, OpRole::kGradDenseAllReduce, 0, Phase::kBackward);
    const auto g1 = ops_with(s, r, OpRole::kGradDenseAllReduce, 1, Phase::kBackward);
    ASSERT_EQ(g0.size(), 1u);
    ASSERT_EQ(g1.size(), 1u);
    EXPECT_EQ(s.op(g0[0]).bytes, 65536.0);
    EXPECT_EQ(s.op(g1[0]).bytes, 17408.0);
  }
}

// The whole step's flops: a dense block trades the gate and experts of an MoE block for its
// FFN, forward 1x and backward 2x.
TEST(BlockShapes, DenseBlockFlopsReplaceTheMoeParts) {
  core::ModelConfig moe = testing::tiny_moe_model();
  core::ModelConfig dense = moe;
  dense.dense_layers = 1;  // dense_ffn_hidden 0: ffn_hidden
  for (const char* parallel : {"ep=8", "tp=2,esp=2,ep=4", "tp=2,ep=4"}) {
    const LayerWorkload w = layer_workload(moe, setup(moe, parallel).parallel);
    const Schedule a = build_training_step(setup(moe, parallel));
    const Schedule b = build_training_step(setup(dense, parallel));
    const double moe_part = 3.0 * (w.gate_flops + w.expert_flops) * 8;
    const double ffn = 3.0 * w.dense_ffn_flops * 8;
    const double tp = std::string(parallel) == "ep=8" ? 1 : 2;
    EXPECT_EQ(w.dense_ffn_flops, 2.0 * 64 * 64 * 128 * 2 / tp) << parallel;
    EXPECT_DOUBLE_EQ(b.totals()[size_t(OpKind::kCompute)].flops,
                     a.totals()[size_t(OpKind::kCompute)].flops - moe_part + ffn)
        << parallel;
    // No A2A at all in block 0, and half the step's A2As.
    EXPECT_EQ(b.totals()[size_t(OpKind::kAllToAll)].ops * 2,
              a.totals()[size_t(OpKind::kAllToAll)].ops)
        << parallel;
  }
}

TEST(BlockShapes, SharedExpertsRunBetweenTheGateAndTheExpertsBesideTheDispatch) {
  core::ModelConfig m = testing::tiny_moe_model();
  m.shared_experts = 2;
  m.shared_expert_ffn_hidden = 32;
  const Schedule s = build_training_step(setup(m, "ep=8"));
  EXPECT_NO_THROW(s.validate());
  for (int r = 0; r < 8; ++r)
    for (int layer : {0, 1}) {
      EXPECT_EQ(compute_roles(s, r, layer, Phase::kForward),
                (std::vector<OpRole>{OpRole::kAttention, OpRole::kGate, OpRole::kSharedExpert,
                                     OpRole::kExpert}));
      EXPECT_EQ(compute_roles(s, r, layer, Phase::kBackward),
                (std::vector<OpRole>{OpRole::kSharedExpert, OpRole::kExpert, OpRole::kGate,
                                     OpRole::kAttention}));
      for (Phase phase : {Phase::kForward, Phase::kBackward}) {
        const auto shared = ops_with(s, r, OpRole::kSharedExpert, layer, phase);
        ASSERT_EQ(shared.size(), 1u);
        // 2 t h f_shared x 2 GEMMs x 2 shared experts = 2 x 64 x 64 x 32 x 2 x 2, 2x backward.
        EXPECT_EQ(s.op(shared[0]).flops, phase == Phase::kForward ? 1048576.0 : 2097152.0);
        // The first A2A does not wait for the shared experts (it runs while they compute);
        // the experts and the rest of the block do.
        // (Backward, the first A2A carries the combine's gradient the dispatch's way and
        // has the dispatch's role.)
        const auto first_a2a = ops_with(s, r, OpRole::kDispatchA2A, layer, phase);
        ASSERT_EQ(first_a2a.size(), 1u);
        EXPECT_FALSE(waits_for(s, first_a2a[0], shared[0]));
        EXPECT_TRUE(waits_for(s, ops_with(s, r, OpRole::kExpert, layer, phase)[0], shared[0]));
        // What comes next waits for them explicitly: forward the next block's attention,
        // backward the gate.
        const auto next = phase == Phase::kForward
                              ? ops_with(s, r, OpRole::kAttention, layer + 1, phase)
                              : ops_with(s, r, OpRole::kGate, layer, phase);
        if (phase == Phase::kBackward || layer == 0) {
          ASSERT_EQ(next.size(), 1u);
          const auto deps = s.deps(next[0]);
          EXPECT_TRUE(std::find(deps.begin(), deps.end(), shared[0]) != deps.end());
        }
      }
    }
  // The shared experts' parameters join the block's dense gradients (tp = 1):
  // (4 h^2 + 2 x 2 h f_shared + h E) x 2 bytes.
  const auto g = ops_with(s, 0, OpRole::kGradDenseAllReduce, 1, Phase::kBackward);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(s.op(g[0]).bytes, (4.0 * 64 * 64 + 2 * 2 * 64 * 32 + 64 * 8) * 2);
  const LayerWorkload w = layer_workload(m, setup(m, "ep=8").parallel);
  EXPECT_EQ(w.shared_expert_flops, 1048576.0);
}

// With TP the shared experts are one Megatron MLP each, sharded: flops / tp and the TP
// AllReduce of their output on the intra-node stream, before the ESP collectives and off the
// token stream the dispatch takes.
TEST(BlockShapes, SharedExpertsUnderTpAllReduceOnTheIntraNodeStream) {
  core::ModelConfig m = testing::tiny_moe_model();
  m.shared_experts = 1;  // shared_expert_ffn_hidden 0: ffn_hidden
  const Schedule s = build_training_step(setup(m, "tp=2,esp=2,ep=4"));
  EXPECT_NO_THROW(s.validate());
  for (int r = 0; r < 8; ++r)
    for (Phase phase : {Phase::kForward, Phase::kBackward}) {
      const auto shared = ops_with(s, r, OpRole::kSharedExpert, 0, phase);
      ASSERT_EQ(shared.size(), 1u);
      EXPECT_EQ(s.op(shared[0]).flops,
                (phase == Phase::kForward ? 1.0 : 2.0) * 2 * 64 * 64 * 128 * 2 / 2);
      const auto ar = ops_with(s, r, OpRole::kDenseFfnTpAllReduce, 0, phase);
      ASSERT_EQ(ar.size(), 1u);
      EXPECT_EQ(s.label(ar[0]).knob, "shared-expert");
      EXPECT_EQ(s.op(ar[0]).stream, kIntraStream);
      EXPECT_EQ(s.op(ar[0]).bytes, 64.0 * 64 * 2);
      EXPECT_TRUE(waits_for(s, ar[0], shared[0]));
      const auto a2a = ops_with(s, r, OpRole::kDispatchA2A, 0, phase);
      ASSERT_EQ(a2a.size(), 1u);
      EXPECT_FALSE(waits_for(s, a2a[0], ar[0]));
    }
  const LayerWorkload w = layer_workload(m, setup(m, "tp=2,esp=2,ep=4").parallel);
  EXPECT_EQ(w.dense_grad_bytes, ((4.0 * 64 * 64 + 2.0 * 64 * 128) / 2 + 64 * 8) * 2);
}

// Grouped-query attention: K and V are h kv_heads / heads wide.
TEST(BlockShapes, GroupedQueryAttentionShrinksKvProjectionsAndCpBytes) {
  core::ModelConfig mha = testing::tiny_moe_model();
  core::ModelConfig gqa = mha;
  gqa.kv_heads = 1;  // 4 query heads share one K/V head of 16
  EXPECT_EQ(gqa.attention_params(), 2.0 * 64 * 64 + 2.0 * 64 * 16);
  EXPECT_EQ(mha.attention_params(), 4.0 * 64 * 64);
  const core::ParallelConfig p = setup(gqa, "cp=2,ep=4").parallel;
  const LayerWorkload a = layer_workload(mha, p), b = layer_workload(gqa, p);
  // t = 2 x 32 / cp = 32; projections 2 t x params, scores and context 4 t s h.
  EXPECT_EQ(a.attention_flops, 32.0 * (8 * 64 * 64 + 4 * 32 * 64));
  EXPECT_EQ(b.attention_flops, 32.0 * (2 * (2 * 64 * 64 + 2 * 64 * 16) + 4 * 32 * 64));
  // CP's K/V AllGather output: 2 cp t h_kv x 2 bytes.
  EXPECT_EQ(a.cp_kv_bytes, 2.0 * 2 * 32 * 64 * 2);
  EXPECT_EQ(b.cp_kv_bytes, 2.0 * 2 * 32 * 16 * 2);
  EXPECT_EQ(b.dense_grad_bytes, (2.0 * 64 * 64 + 2.0 * 64 * 16 + 64 * 8) * 2);
  const Schedule s = build_training_step(setup(gqa, "cp=2,ep=4"));
  EXPECT_NO_THROW(s.validate());
  for (int r = 0; r < 8; ++r) {
    const auto ag = ops_with(s, r, OpRole::kAttnCpAllGather, 0, Phase::kForward);
    const auto rs = ops_with(s, r, OpRole::kAttnCpReduceScatter, 0, Phase::kBackward);
    ASSERT_EQ(ag.size(), 1u);
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(s.op(ag[0]).bytes, 4096.0);
    EXPECT_EQ(s.op(rs[0]).bytes, 4096.0);
    const auto attn = ops_with(s, r, OpRole::kAttention, 0, Phase::kBackward);
    EXPECT_EQ(s.op(attn[0]).flops, 2 * b.attention_flops);
  }
}

// Every strategy builds a valid step on every layout for a model with all three shapes, within
// the op bound the step is priced by before it is built.
TEST(BlockShapes, EveryStrategyBuildsTheShapesWithinTheOpBound) {
  core::ModelConfig m = testing::tiny_moe_model();
  m.layers = 3;
  m.dense_layers = 1;
  m.shared_experts = 2;
  m.kv_heads = 2;
  m.vocab_size = 100;
  const char* strategies[] = {"baseline",
                              "base=monta-o3,chunks_fwd=3,chunks_bwd=5",
                              "base=fsmoe,chunks_fwd=2,chunks_bwd=3,grad_partitions=5",
                              "base=lina,chunks=3,grad_partitions=7",
                              "base=hybridep,hybrid_domain=2,compression=0.1",
                              "hier-a2a"};
  int built = 0;
  for (const char* parallel :
       {"ep=8", "tp=2,esp=2,ep=4", "tp=2,cp=2,esp=2,ep=2", "cp=2,ep=4", "tp=2,esp=1,ep=4"})
    for (const char* strategy : strategies) {
      LayerSetup s = setup(m, parallel, strategy);
      s.lm_head = true;
      Schedule sched(1);
      try {
        sched = build_training_step(s);
      } catch (const Error&) {
        continue;  // knobs this layout cannot run
      }
      ++built;
      EXPECT_NO_THROW(sched.validate()) << parallel << " " << strategy;
      EXPECT_LE(sched.num_ops(), step_ops_bound(s)) << parallel << " " << strategy;
      // Block 0 is dense under every strategy: no A2A, no expert, no expert gradients.
      for (OpRole role : {OpRole::kDispatchA2A, OpRole::kCombineA2A, OpRole::kExpert,
                          OpRole::kGradExpertAllReduce, OpRole::kExpertTransferAllGather,
                          OpRole::kExpertTransferGradReduceScatter})
        EXPECT_EQ(count_role(sched, role, 0), 0) << parallel << " " << strategy;
      EXPECT_EQ(count_role(sched, OpRole::kDenseFfn, 0), 16) << parallel << " " << strategy;
      EXPECT_EQ(count_role(sched, OpRole::kSharedExpert, 1), 16) << parallel << " " << strategy;
      EXPECT_EQ(count_role(sched, OpRole::kSharedExpert, 2), 16) << parallel << " " << strategy;
    }
  EXPECT_GE(built, 25);
}

}  // namespace
}  // namespace moecomm::sched

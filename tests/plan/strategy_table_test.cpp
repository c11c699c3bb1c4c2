#include "plan/strategy_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/presets.h"
#include "core/topology.h"
#include "cost/collective_model.h"
#include "support/estimate_rows.h"
#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

PlanInput preset_input(const std::string& model_name, const std::string& parallel = "") {
  PlanInput in;
  in.model = core::load_model(model_name);
  in.cluster = core::load_cluster(in.model.cluster.value_or(core::kDefaultCluster));
  core::ParallelSpec spec = parallel.empty() && in.model.parallel
                                ? *in.model.parallel
                                : core::parse_parallel_spec(parallel, "test");
  in.parallel = core::resolve_parallel(spec, in.cluster.world_size(), in.model.experts, "test");
  return in;
}

TEST(StrategyTable, DefaultPresetHasEveryCandidateAndRecommendsTheFastest) {
  ModelEstimates p = estimate_strategies(preset_input(core::kDefaultModel));
  std::set<std::string> names;
  for (const auto& s : p.strategies) names.insert(s.name);
  EXPECT_EQ(names, (std::set<std::string>{"baseline", "hier-a2a", "monta-o1", "monta-o2",
                                          "monta-o3", "fsmoe", "hybridep", "hybridep-sr", "lina"}));
  EXPECT_TRUE(p.skipped.empty());
  auto best = std::min_element(p.strategies.begin(), p.strategies.end(),
                               [](auto& a, auto& b) { return a.total_s() < b.total_s(); });
  EXPECT_EQ(p.fastest, best->name);
  for (const auto& s : p.strategies) {
    EXPECT_GT(s.forward_s, 0) << s.name;
    EXPECT_GT(s.backward_s, s.forward_s * 0.5) << s.name;
    EXPECT_GT(s.memory_bytes, 0) << s.name;
  }
}

// A cluster and model small enough to price the baseline by hand.
PlanInput tiny() {
  PlanInput in;
  in.cluster.name = "tiny";
  in.cluster.levels = {{"node", 2, 10e9, 10e-6}, {"gpu", 2, 100e9, 1e-6}};
  in.cluster.device = {100e12, 16e9, 1e12};
  in.model.name = "tiny";
  in.model.hidden = 1024;
  in.model.ffn_hidden = 4096;
  in.model.experts = 4;
  in.model.top_k = 2;
  in.model.layers = 2;
  in.model.heads = 8;
  in.model.seq_len = 512;
  in.model.micro_batch = 2;
  in.model.dtype_bytes = 2;
  in.parallel = core::resolve_parallel({}, 4, 4, "test");  // dp = ep = 4
  in.cluster.device.compute_efficiency = 0.5;
  in.gemm_startup_s = 0;
  return in;
}

// recompute_experts frees each expert copy's GeLU input and output (4 ffn / h bytes per token
// and hidden unit, Table 4's split term) in every layer: b s l k 4 ffn, nothing else.
TEST(StrategyTable, RecomputedExpertsFreeTheirInnerActivations) {
  PlanInput in = tiny();
  for (const char* recompute : {"none", "selective"}) {
    in.recompute = recompute;
    const double kept = memory_per_device(in, false), freed = memory_per_device(in, true);
    EXPECT_DOUBLE_EQ(kept - freed, 2.0 * 512 * 2 * 2 * 4 * 4096) << recompute;
  }
  in.recompute = "full";  // only the layer inputs stay anyway
  EXPECT_DOUBLE_EQ(memory_per_device(in, true), memory_per_device(in, false));
}

TEST(StrategyTable, BaselineForwardByHand) {
  PlanInput in = tiny();
  ModelEstimates p = estimate_strategies(in);
  // Each rank sends T k h bytes = 1024 x 2 x 1024 x 2 = 4194304 bytes; of its 4 EP peers, 2 sit
  // on the other node (share 1/2) and 1 on its own (share 1/4); the messages are in flight
  // together (one latency per level). The node link (10 GB/s) is shared by the node's 2 GPUs.
  const double n = 1024.0 * 2 * 1024 * 2;
  const double inter = 10e-6 + 0.5 * n / 5e9, intra = 1e-6 + 0.25 * n / 100e9;
  const double a2a = std::max(inter, intra);
  // Expert GEMMs: 2 flops x 2048 rows x h x ffn x 2 GEMMs at 50 Tflop/s.
  const double expert = 2.0 * 2048 * 1024 * 4096 * 2 / 50e12;
  EXPECT_NEAR(estimate_row(p, "baseline").forward_s, 2 * a2a + expert, 1e-12);
  EXPECT_NEAR(estimate_row(p, "baseline").a2a_s.value(), a2a, 1e-12);
  // No expert sharding: MoNTA's drop has nothing to drop.
  ASSERT_EQ(p.skipped.size(), 3u);
  EXPECT_NE(p.skipped[0].reason.find("esp > 1"), std::string::npos);
}

TEST(StrategyTable, HybridEpNeverLosesToTheBaselineItContains) {
  // Domain size 1 everywhere is plain EP, priced exactly as the baseline.
  for (const auto& name : core::list_presets("models")) {
    ModelEstimates p =
        estimate_strategies(preset_input(name, core::load_model(name).parallel ? "" : "tp=1"));
    EXPECT_LE(estimate_row(p, "hybridep").total_s(),
              estimate_row(p, "baseline").total_s() * (1 + 1e-12))
        << name;
    EXPECT_LE(estimate_row(p, "hybridep-sr").total_s(),
              estimate_row(p, "baseline").total_s() * (1 + 1e-12))
        << name;
  }
}

TEST(StrategyTable, MontaChunkingNeverLosesToO1) {
  ModelEstimates p = estimate_strategies(preset_input("monta-2x70b"));
  const double o1 = estimate_row(p, "monta-o1").a2a_s.value(),
               o2 = estimate_row(p, "monta-o2").a2a_s.value(),
               o3 = estimate_row(p, "monta-o3").a2a_s.value();
  EXPECT_LE(o2, o1);
  EXPECT_LE(o3, o2);
  EXPECT_GT(estimate_row(p, "monta-o2").knobs.chunks_fwd, 1);
  // MoNTA drops the 8x TP replication of the dispatch: its A2A beats the baseline's.
  EXPECT_LT(o1, estimate_row(p, "baseline").a2a_s.value());
}

TEST(StrategyTable, ContextAndPipelineParallelismSplitTheWork) {
  PlanInput in = tiny();
  in.cluster.levels[1].count = 4;  // 8 ranks
  in.parallel = core::resolve_parallel(core::parse_parallel_spec("cp=2,ep=4", "t"), 8, 4, "t");
  ModelEstimates cp2 = estimate_strategies(in);
  in.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=4", "t"), 8, 4, "t");
  ModelEstimates cp1 = estimate_strategies(in);
  // cp = 2 halves the tokens a rank routes, so its A2A carries half the bytes.
  EXPECT_DOUBLE_EQ(cp2.workload["tokens_per_rank"].get<double>() * 2,
                   cp1.workload["tokens_per_rank"].get<double>());
  EXPECT_DOUBLE_EQ(cp2.workload["a2a_bytes_per_rank"].get<double>() * 2,
                   cp1.workload["a2a_bytes_per_rank"].get<double>());
  // pp = 2 halves the layers a stage holds (weights) but not the 1F1B activations: with M = 2
  // micro-batches the first stage holds both, of half the layers.
  in.parallel = core::resolve_parallel(core::parse_parallel_spec("pp=2,ep=4", "t"), 8, 4, "t");
  in.model.micro_batches = 2;
  ModelEstimates pp2 = estimate_strategies(in);
  EXPECT_LT(estimate_row(pp2, "baseline").memory_bytes, estimate_row(cp1, "baseline").memory_bytes);
  EXPECT_GT(estimate_row(pp2, "baseline").memory_bytes,
            estimate_row(cp1, "baseline").memory_bytes / 2);
}

TEST(StrategyTable, TinyLayersSkipChunkingInsteadOfFailing) {
  PlanInput in = preset_input("monta-2x70b");
  in.model.seq_len = 1;  // an A2A of 32 KB per rank, below the 8 MB I_minimal of the preset
  ModelEstimates p = estimate_strategies(in);
  EXPECT_NO_THROW(estimate_row(p, "monta-o1"));
  ASSERT_EQ(p.skipped.size(), 2u);
  EXPECT_EQ(p.skipped[0].name, "monta-o2");
  EXPECT_NE(p.skipped[0].reason.find("below I_minimal"), std::string::npos);
  for (const auto& s : p.strategies) EXPECT_TRUE(std::isfinite(s.total_s())) << s.name;
}

// The hier-a2a row's split names the nodes the EP group spans and its ranks on each, as the
// schedule's 2DH A2A groups them (a node: the innermost level's worker), on FSMoE's Testbed-A
// (6 nodes x 8 GPUs).
TEST(StrategyTable, HierarchicalSplitIsNodesOfTheEpGroup) {
  const auto on_testbed_a = [](const std::string& model, const std::string& parallel) {
    PlanInput in;
    in.model = core::load_model(model);
    in.cluster = core::load_cluster("fsmoe-testbed-a");
    in.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "test"), 48,
                                         in.model.experts, "test");
    return estimate_strategies(in);
  };
  // The model's own layout: one EP rank on each node (ep = 6, esp = tp = 8).
  ModelEstimates p = on_testbed_a("fsmoe-mixtral-22b", "tp=8,ep=6");
  const StrategyEstimate* h = &estimate_row(p, "hier-a2a");
  ASSERT_TRUE(h->hierarchical);
  EXPECT_EQ(h->hierarchical->nodes, 6);
  EXPECT_EQ(h->hierarchical->ranks_per_node, 1);
  EXPECT_EQ(h->source,
            "2DH hierarchical A2A (Tutel) over the EP group's 6 ranks, 1 on each of 6 nodes: no "
            "intra-node step, one inter-node A2A among the 6 nodes");
  // 16 EP ranks on 2 nodes.
  p = on_testbed_a("netmoe-moe-gpt-s", "ep=16");
  h = &estimate_row(p, "hier-a2a");
  ASSERT_TRUE(h->hierarchical);
  EXPECT_EQ(h->hierarchical->nodes, 2);
  EXPECT_EQ(h->hierarchical->ranks_per_node, 8);
  EXPECT_EQ(h->source,
            "2DH hierarchical A2A (Tutel) over the EP group's 16 ranks, 8 on each of 2 nodes: an "
            "intra-node A2A among each node's 8, then 8 inter-node A2As (one per rank of a node) "
            "among the 2 nodes");
  // The two phases one after the other: among a node's 8 GPUs (level 1), then among 2 nodes
  // (level 0), each rank's whole send buffer in each.
  const core::Topology topology(core::load_cluster("fsmoe-testbed-a"));
  const cost::CollectiveModel comm(topology);
  const double bytes = p.workload["a2a_bytes_per_rank"].get<double>();
  EXPECT_DOUBLE_EQ(h->a2a_s.value(), comm.time(cost::Collective::kAllToAll, 1, 8, bytes) +
                                         comm.time(cost::Collective::kAllToAll, 0, 2, bytes));
  // The EP group inside one node: one node of 8 GPUs (not 8 "nodes" of one), and the flat A2A.
  p = on_testbed_a("netmoe-moe-gpt-s", "ep=8");
  h = &estimate_row(p, "hier-a2a");
  ASSERT_TRUE(h->hierarchical);
  EXPECT_EQ(h->hierarchical->nodes, 1);
  EXPECT_EQ(h->hierarchical->ranks_per_node, 8);
  EXPECT_EQ(h->source,
            "2DH hierarchical A2A (Tutel) over the EP group's 8 ranks: they share one node, so it "
            "runs as the flat A2A");
  EXPECT_EQ(h->a2a_s.value(), estimate_row(p, "baseline").a2a_s.value());
  // esp = 2 strides the EP group: ranks 0, 2, ..., 10 put 4 on node 0 and 2 on node 1.
  p = on_testbed_a("fsmoe-mixtral-22b", "tp=2,ep=6");
  h = &estimate_row(p, "hier-a2a");
  EXPECT_FALSE(h->hierarchical);
  EXPECT_EQ(h->source,
            "2DH hierarchical A2A (Tutel) over the EP group's 6 ranks: 2 nodes hold unequal "
            "numbers of them, so it runs as the flat A2A");
  EXPECT_EQ(h->a2a_s.value(), estimate_row(p, "baseline").a2a_s.value());
}

TEST(StrategyTable, Errors) {
  PlanInput in = tiny();
  in.parallel = core::resolve_parallel({}, 8, 4, "test");
  EXPECT_ERROR_HAS(estimate_strategies(in), "parallel configuration", "covers 8 ranks", "has 4");
  in = tiny();
  in.cluster.device.compute_efficiency = 1.5;
  EXPECT_ERROR_HAS(estimate_strategies(in), "gemm model", "efficiency must be in (0, 1]");
  in = tiny();
  in.recompute = "sometimes";
  EXPECT_ERROR_HAS(estimate_strategies(in), "recompute", "none, selective or full");
  in = tiny();
  in.gemm_startup_s = -1;
  EXPECT_ERROR_HAS(estimate_strategies(in), "gemm start-up", "negative");
}

}  // namespace
}  // namespace moecomm::plan

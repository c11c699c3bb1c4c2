#include "plan/layout_search.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "plan/candidate_pricer.h"
#include "plan/monta_memory.h"
#include "plan/search_planner.h"
#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

// h = 64, f = 256, E = 4 experts (top-1), 4 layers, 4 heads, s = 16, b = 1, no vocabulary: one
// layer's attention is 4 h^2 = 16384 parameters, its gate h E = 256, each expert 2 h f = 32768.
core::ModelConfig small_model() {
  core::ModelConfig m;
  m.name = "small";
  m.hidden = 64;
  m.ffn_hidden = 256;
  m.experts = 4;
  m.top_k = 1;
  m.layers = 4;
  m.heads = 4;
  m.seq_len = 16;
  m.micro_batch = 1;
  m.dtype_bytes = 2;
  return m;
}

core::Cluster small_cluster(int nodes, int gpus, double memory_bytes) {
  core::Cluster c;
  c.name = "small-cluster";
  c.levels = {{"node", nodes, 50e9, 5e-6}, {"gpu", gpus, 200e9, 2e-6}};
  c.device.flops = 100e12;
  c.device.memory_bytes = memory_bytes;
  c.device.memory_bandwidth = 1e12;
  return c;
}

// pp = 2, dp = 2, ep = 2 on 4 devices, M = 4 micro-batches, no recomputation.
PlanInput pipeline_input(int zero) {
  PlanInput in;
  in.model = small_model();
  in.model.micro_batches = 4;
  in.cluster = small_cluster(1, 4, 80e9);
  in.parallel.pp = 2;
  in.parallel.dp = 2;
  in.parallel.ep = 2;
  in.parallel.edp = 1;
  in.recompute = "none";
  in.zero = zero;
  return in;
}

sched::Strategy knobs(sched::PpSchedule schedule, int virtual_stages, int zero) {
  sched::Strategy s;
  s.pp_schedule = schedule;
  s.virtual_stages = virtual_stages;
  s.zero = zero;
  return s;
}

// One micro-batch through one layer, b s h = 1024 bytes per unit of h: attention 13, the expert
// copy 5 + 4 f / h = 21, scores 5 a s / h = 5: 39 x 1024 bytes.
constexpr double kLayerActivation = 39 * 1024.0;

TEST(DeviceMemory, InFlightActivationsPerPipelineSchedule) {
  const PlanInput in = pipeline_input(0);
  // 1F1B: stage 0 holds min(pp - 0, M) = 2 micro-batches of its 2 layers, stage 1 one.
  const MemoryBreakdown f1b = device_memory(in, knobs(sched::PpSchedule::k1F1B, 1, 0));
  EXPECT_EQ(f1b.stage, 0);
  EXPECT_DOUBLE_EQ(f1b.activations, 2 * 2 * kLayerActivation);
  // GPipe: every stage holds all M = 4.
  const MemoryBreakdown gpipe = device_memory(in, knobs(sched::PpSchedule::kGpipe, 1, 0));
  EXPECT_DOUBLE_EQ(gpipe.activations, 4 * 2 * kLayerActivation);
  // Interleaved, V = 2 (one layer a chunk): the first stage holds pp (1 + (pp - 1) / (pp V)) =
  // 2.5 micro-batches of its layers (Korthikanti et al. 2022 Sec. 4.2.3).
  const MemoryBreakdown inter = device_memory(in, knobs(sched::PpSchedule::kInterleaved, 2, 0));
  EXPECT_EQ(inter.stage, 0);
  EXPECT_DOUBLE_EQ(inter.activations, 2.5 * 2 * kLayerActivation);
  // Many micro-batches: 1F1B and interleaved hold no more (the peak is in the warm-up).
  PlanInput many = in;
  many.model.micro_batches = 64;
  EXPECT_DOUBLE_EQ(device_memory(many, knobs(sched::PpSchedule::k1F1B, 1, 0)).activations,
                   2 * 2 * kLayerActivation);
  EXPECT_DOUBLE_EQ(device_memory(many, knobs(sched::PpSchedule::kInterleaved, 2, 0)).activations,
                   2.5 * 2 * kLayerActivation);
  EXPECT_DOUBLE_EQ(device_memory(many, knobs(sched::PpSchedule::kGpipe, 1, 0)).activations,
                   64 * 2 * kLayerActivation);
  // One micro-batch: every schedule holds it alone.
  PlanInput one = in;
  one.model.micro_batches = 1;
  EXPECT_DOUBLE_EQ(device_memory(one, knobs(sched::PpSchedule::kGpipe, 1, 0)).activations,
                   2 * kLayerActivation);
}

// A stage holds 2 layers: dense 2 (16384 + 256) = 33280 parameters over dp x cp = 2, experts
// 2 x 4 x 32768 / ep 2 = 131072 over edp = 1.
TEST(DeviceMemory, ModelStatesPerZeroStage) {
  const double dense = 33280, experts = 131072;
  for (int zero = 0; zero <= 3; ++zero) {
    const PlanInput in = pipeline_input(zero);
    const MemoryBreakdown m = device_memory(in, knobs(sched::PpSchedule::k1F1B, 1, zero));
    const double dp = 2;
    EXPECT_DOUBLE_EQ(m.weights, (zero == 3 ? 2 / dp : 2) * dense + 2 * experts) << zero;
    EXPECT_DOUBLE_EQ(m.gradients, (zero >= 2 ? 2 / dp : 2) * dense + 2 * experts) << zero;
    EXPECT_DOUBLE_EQ(m.optimizer_states, (zero >= 1 ? 12 / dp : 12) * dense + 12 * experts) << zero;
  }
}

// Dense layers, shared experts and grouped-query attention change what a stage holds; the
// embedding sits on the first stage, the LM head on the last.
TEST(DeviceMemory, DenseLayersSharedExpertsGqaAndVocabulary) {
  PlanInput in = pipeline_input(0);
  in.model.dense_layers = 2;  // stage 0's two layers are dense
  in.model.dense_ffn_hidden = 512;
  in.model.kv_heads = 1;  // K and V: 64 x 16 each
  in.model.shared_experts = 1;
  in.model.vocab_size = 1000;
  in.model.micro_batches = 1;
  // Stage 0: 2 x (attention 2 h^2 + 2 h^2/4 = 10240, dense FFN 2 h 512 = 65536) + embedding
  // 64000. Stage 1: 2 x (10240 + gate 256 + shared 32768) + 2 x 4 x 32768 / 2 experts + LM head
  // 64000. Zero 0: 2 B weights each.
  const MemoryBreakdown m = device_memory(in, knobs(sched::PpSchedule::k1F1B, 1, 0));
  const double stage1_dense = 2 * (10240 + 256 + 32768) + 64000.0, stage1_experts = 131072;
  EXPECT_EQ(m.stage, 1);
  EXPECT_DOUBLE_EQ(m.weights, 2 * (stage1_dense + stage1_experts));
  // Stage 1's activations: one micro-batch of 2 MoE layers, attention 5 + 4 + 4 x 1/4 = 10,
  // the routed copy 21, the shared expert 4 f / h = 16, scores 5; plus the LM head's fp32
  // logits 4 b s V.
  EXPECT_DOUBLE_EQ(m.activations, 2 * (10 + 21 + 16 + 5) * 1024.0 + 4.0 * 16 * 1000);
}

// Every parallel configuration of 8 devices (2 nodes of 4), by brute force over all sizes.
TEST(LayoutSearch, EnumerationMatchesBruteForce) {
  const core::ModelConfig m = small_model();
  const core::Cluster c = small_cluster(2, 4, 80e9);
  std::set<std::string> expected;
  for (int pp = 1; pp <= 8; ++pp)
    for (int tp = 1; tp <= 8; ++tp)
      for (int cp = 1; cp <= 8; ++cp)
        for (int dp = 1; dp <= 8; ++dp)
          for (int esp = 1; esp <= 8; ++esp)
            for (int ep = 1; ep <= 8; ++ep)
              for (int edp = 1; edp <= 8; ++edp) {
                if (tp * cp * dp * pp != 8 || esp * ep * edp * pp != 8) continue;
                if (4 % tp || 4 % esp || m.heads % tp || m.seq_len % cp) continue;
                if (m.ffn_hidden % esp || m.experts % ep || pp > m.layers) continue;
                core::ParallelConfig p;
                p.tp = tp, p.cp = cp, p.dp = dp, p.pp = pp, p.esp = esp, p.ep = ep, p.edp = edp;
                expected.insert(layout_string(p));
              }
  std::set<std::string> got;
  const auto all = enumerate_parallel(m, c);
  for (const auto& p : all) got.insert(layout_string(p));
  EXPECT_EQ(got.size(), all.size());  // no repeats
  EXPECT_EQ(got, expected);
  // pp 1: dense 9 (tp 1: cp 1, 2, 4, 8; tp 2: cp 1, 2, 4; tp 4: cp 1, 2) x MoE 8 (esp 1: ep 1,
  // 2, 4; esp 2: ep 1, 2, 4; esp 4: ep 1, 2); pp 2: 6 x 6; pp 4: 3 x 3.
  EXPECT_EQ(all.size(), 9u * 8 + 6 * 6 + 3 * 3);
  // Global batch 8: dp divides 8 always; interleaved:V needs pp > 1, M a multiple of pp and
  // pp V <= 4 layers: pp 2, V 2, where M = 8 / dp is even for every dp (1, 2, 4).
  const auto layouts = enumerate_layouts(m, c, 8);
  int interleaved = 0;
  for (const auto& l : layouts) {
    EXPECT_EQ(l.micro_batches * l.parallel.dp, 8);
    if (l.pipeline.pp_schedule == sched::PpSchedule::kInterleaved) {
      ++interleaved;
      EXPECT_EQ(l.parallel.pp, 2);
      EXPECT_EQ(l.pipeline.virtual_stages, 2);
    }
  }
  EXPECT_EQ(interleaved, 6 * 6);
  EXPECT_EQ(layouts.size(), all.size() + interleaved);
  EXPECT_ERROR_HAS(enumerate_layouts(m, c, 0), "--global-batch", "positive multiple");
}

TEST(LayoutSearch, StageClusterKeepsTheInnerLevels) {
  const core::Cluster c = small_cluster(4, 8, 80e9);
  core::Cluster s = stage_cluster(c, 16);
  EXPECT_EQ(s.levels[0].count, 2);
  EXPECT_EQ(s.levels[1].count, 8);
  s = stage_cluster(c, 4);
  EXPECT_EQ(s.levels[0].count, 1);
  EXPECT_EQ(s.levels[1].count, 4);
  EXPECT_ERROR_HAS(stage_cluster(c, 12), "stage cluster",
                   "12 ranks do not split into whole groups of 8");
}

TEST(LayoutSearch, RecommendsTheFastestLayoutThatFits) {
  PlanInput in;
  in.model = small_model();
  in.model.vocab_size = 1000;
  in.cluster = small_cluster(2, 4, 80e9);
  LayoutSearchOptions o;
  o.global_batch = 8;
  o.budget_s = 30;
  o.max_layouts = 3;
  const LayoutSearch s = search_layouts(in, o);
  EXPECT_EQ(s.enumerated, 117 + 36);
  EXPECT_EQ(s.fitting, s.enumerated);  // 80 GB holds all of them
  EXPECT_EQ(s.simulated, 3);
  EXPECT_EQ(s.unsimulated, 117 - 3);
  EXPECT_FALSE(s.shortfall);
  ASSERT_FALSE(s.rows.empty());
  for (size_t i = 1; i < s.rows.size(); ++i) EXPECT_LE(s.rows[i - 1].step_s, s.rows[i].step_s);
  for (const auto& r : s.rows) {
    EXPECT_LE(r.memory.total(), in.cluster.device.memory_bytes);
    EXPECT_GT(r.mfu, 0);
    EXPECT_LT(r.mfu, 1);
    EXPECT_DOUBLE_EQ(r.tokens_per_s, 8 * 16 / r.step_s);
  }
  const nlohmann::json j = layout_search_to_json(s, in, 8);
  EXPECT_EQ(j["recommended"], layout_string(s.rows.front().layout.parallel));
  EXPECT_TRUE(j["shortfall"].is_null());
  EXPECT_EQ(j["layouts"].size(), s.rows.size());
}

// One stage, one micro-batch, one block and no vocabulary: the pipeline formula adds nothing,
// and a layout's step is the simulated step of its knobs, exactly.
TEST(LayoutSearch, OneStageOneMicroBatchIsTheSimulatedStep) {
  PlanInput in;
  in.model = small_model();
  in.model.layers = 1;
  in.cluster = small_cluster(1, 4, 80e9);
  LayoutSearchOptions o;
  o.global_batch = 1;  // dp = 1, M = 1
  o.max_layouts = 2;
  o.budget_s = 30;
  const LayoutSearch s = search_layouts(in, o);
  EXPECT_EQ(s.enumerated, 3 * 6);  // (tp, cp) = (1, 4), (2, 2), (4, 1); 6 (esp, ep)
  ASSERT_FALSE(s.rows.empty());
  for (const LayoutRow& r : s.rows) {
    EXPECT_EQ(r.layout.micro_batches, 1);
    EXPECT_EQ(r.layout.parallel.pp, 1);
    EXPECT_EQ(r.hop_s, 0);
    PlanInput at = in;
    at.parallel = r.layout.parallel;
    CandidatePricer pricer(at, 1);
    const auto step = pricer.price({r.knobs, r.layout.parallel});
    ASSERT_TRUE(step);
    EXPECT_NEAR(r.step_s, step->step_s, 1e-12 * step->step_s);
    EXPECT_DOUBLE_EQ(r.block_s, step->forward_s + step->backward_s);
  }
}

// With too little memory some layouts are dropped, and every recommended one fits.
TEST(LayoutSearch, DropsLayoutsOverMemory) {
  PlanInput in;
  in.model = small_model();
  in.model.vocab_size = 1000;
  in.cluster = small_cluster(2, 4, 80e9);
  in.recompute = "none";
  in.zero = 0;
  // The most a layout needs with its experts' activations kept; just below it drops some.
  double most = 0, least = 1e300;
  for (const Layout& l : enumerate_layouts(in.model, in.cluster, 8)) {
    PlanInput at = in;
    at.model.micro_batches = l.micro_batches;
    at.parallel = l.parallel;
    at.whole = WholeLayout{at.model, l.parallel, l.pipeline};
    sched::Strategy k;
    k.recompute_experts = true;
    least = std::min(least, memory_per_device(at, k));
    most = std::max(most, memory_per_device(at, k));
  }
  in.cluster.device.memory_bytes = (most + least) / 2;
  LayoutSearchOptions o;
  o.global_batch = 8;
  o.max_layouts = 2;
  const LayoutSearch s = search_layouts(in, o);
  EXPECT_LT(s.fitting, s.enumerated);
  EXPECT_GT(s.fitting, 0);
  ASSERT_FALSE(s.rows.empty());
  for (const auto& r : s.rows) EXPECT_LE(r.memory.total(), in.cluster.device.memory_bytes);
  // Below the least, nothing fits: the shortfall is that least layout's, by kind.
  in.cluster.device.memory_bytes = least * 0.9;
  const LayoutSearch none = search_layouts(in, o);
  EXPECT_EQ(none.fitting, 0);
  EXPECT_TRUE(none.rows.empty());
  ASSERT_TRUE(none.shortfall);
  EXPECT_DOUBLE_EQ(none.shortfall->needed_bytes(), least);
  EXPECT_DOUBLE_EQ(none.shortfall->over_bytes(), least * 0.1);
  const nlohmann::json j = layout_search_to_json(none, in, 8);
  EXPECT_TRUE(j["recommended"].is_null());
  EXPECT_DOUBLE_EQ(j["shortfall"]["over_GB"].get<double>(), least * 0.1 / 1e9);
}

// `plan` no longer recommends a row over the device's memory: none fits, none is recommended.
TEST(SearchPlanner, NothingFitsRecommendsNothing) {
  PlanInput in;
  in.model = small_model();
  in.cluster = small_cluster(1, 4, 1e3);
  in.parallel.dp = 4;
  in.parallel.ep = 4;
  in.parallel.edp = 1;
  SearchOptions o;
  o.budget_s = 0;
  const Plan p = make_plan(in, o);
  EXPECT_TRUE(p.recommended.empty());
  ASSERT_TRUE(p.shortfall);
  double least = 1e300;
  for (const auto& r : p.rows) {
    EXPECT_FALSE(r.fits(in.cluster));
    least = std::min(least, r.memory_bytes);
  }
  EXPECT_DOUBLE_EQ(p.shortfall->needed_bytes(), least);
  EXPECT_DOUBLE_EQ(p.shortfall->over_bytes(), least - 1e3);
  const nlohmann::json j = plan_to_json(p, in);
  EXPECT_TRUE(j["recommended"].is_null());
  EXPECT_EQ(j["shortfall"]["candidate"], p.shortfall->candidate);
  EXPECT_TRUE(shortfall_text(*p.shortfall).find("over the device's 0.00 GB") != std::string::npos)
      << shortfall_text(*p.shortfall);
}

}  // namespace
}  // namespace moecomm::plan

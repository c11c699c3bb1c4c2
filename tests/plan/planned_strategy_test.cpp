#include "plan/planned_strategy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/presets.h"
#include "core/rank_groups.h"
#include "core/topology.h"
#include "plan/estimates.h"
#include "plan/moe_workload.h"
#include "sched/layer_workload.h"
#include "support/expect_error.h"
#include "support/plan_inputs.h"

namespace moecomm::plan {
namespace {

using sched::named_strategy;
using sched::parse_strategy_knobs;
using sched::Strategy;

const StrategyEstimate* row(const ModelEstimates& p, const std::string& name) {
  auto it = std::find_if(p.strategies.begin(), p.strategies.end(),
                         [&](const auto& s) { return s.name == name; });
  return it == p.strategies.end() ? nullptr : &*it;
}

Strategy planned(const std::string& text, const PlanInput& in, std::string* notes = nullptr) {
  return planned_strategy(parse_strategy_knobs(text, "test"), in, notes);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The presets each method's estimate exists on (every data/ testbed with its own model).
const char* const kPresets[] = {"fsmoe-mixtral-22b", "fsmoe-gpt2-xl-moe", "monta-2x70b",
                                "lina-gpt2", "netmoe-moe-gpt-s"};

TEST(PlannedStrategy, MontaChunksAreAlgorithmN) {
  int checked = 0;
  for (const char* model : kPresets) {
    const PlanInput in = preset_input(model);
    const ModelEstimates plan = estimate_strategies(in);
    for (const char* method : {"monta-o2", "monta-o3"}) {
      const StrategyEstimate* e = row(plan, method);
      if (!e) continue;
      std::string notes;
      const Strategy s = planned(method, in, &notes);
      const int n = e->knobs.chunks_fwd;
      EXPECT_EQ(e->knobs.chunks_bwd, n);  // one N for both A2As, forward and backward
      EXPECT_EQ(s.chunks_fwd, n) << model << " " << method;
      EXPECT_EQ(s.chunks_bwd, n) << model << " " << method;
      Strategy expected = named_strategy(method);
      expected.chunks_fwd = expected.chunks_bwd = n;
      EXPECT_EQ(s, expected);  // nothing else moves
      EXPECT_TRUE(has(notes, "chunks_fwd=" + std::to_string(n) + " from MoNTA Algorithm")) << notes;
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // both levels on at least two presets
}

TEST(PlannedStrategy, FsmoeDegreesAreThePhasesOptimalR) {
  for (const char* model : {"fsmoe-mixtral-22b", "fsmoe-mixtral-7b", "lina-gpt2"}) {
    const PlanInput in = preset_input(model);
    const ModelEstimates plan = estimate_strategies(in);
    const StrategyEstimate* e = row(plan, "fsmoe");
    ASSERT_TRUE(e) << model;
    std::string notes;
    const Strategy s = planned("fsmoe", in, &notes);
    EXPECT_EQ(s.chunks_fwd, e->knobs.chunks_fwd) << model;
    EXPECT_EQ(s.chunks_bwd, e->knobs.chunks_bwd) << model;
    // The estimate gives no piece count: the named default stays, and the notes say why.
    EXPECT_EQ(s.grad_partitions, named_strategy("fsmoe").grad_partitions);
    EXPECT_TRUE(has(notes, "grad_partitions=4 kept")) << notes;
    EXPECT_TRUE(has(notes, "FSMoE Sec. 4")) << notes;
  }
}

// Lina Sec. 4.2: micro-ops of the estimate's size on the larger gradient tensor; the bytes
// here come from sched's workload, which must agree with the plan's.
TEST(PlannedStrategy, LinaPartitionsAreMicroOpsOfTheLayerGradient) {
  for (const char* model : {"lina-gpt2", "lina-transformer-xl", "fsmoe-mixtral-22b"}) {
    const PlanInput in = preset_input(model);
    const ModelEstimates plan = estimate_strategies(in);
    const StrategyEstimate* e = row(plan, "lina");
    ASSERT_TRUE(e) << model;
    ASSERT_TRUE(e->lina) << model;
    const double microop = e->lina->microop_bytes;
    // The gradients of the packed layout (Lina Sec. 4.2): E / ep_group experts per device,
    // reduced over the EDP group that packing creates.
    const auto packed = with_ep(in, e->lina->ep_group);
    ASSERT_TRUE(packed) << model;
    const auto w = sched::layer_workload(in.model, *packed);
    double bytes = 0;
    if (packed->dp * packed->cp > 1) bytes = std::max(bytes, w.dense_grad_bytes);
    if (packed->edp > 1) bytes = std::max(bytes, w.expert_grad_bytes);
    std::string notes;
    const Strategy s = planned("lina", in, &notes);
    const int expected = bytes > 0
                             ? std::min<int>(sched::kMaxGradPartitions, std::ceil(bytes / microop))
                             : named_strategy("lina").grad_partitions;
    EXPECT_EQ(s.grad_partitions, expected) << model;
    EXPECT_EQ(s.chunks_fwd, named_strategy("lina").chunks_fwd);  // no count in the estimate
    EXPECT_TRUE(has(notes, "grad_partitions=" + std::to_string(expected))) << notes;
    EXPECT_TRUE(has(notes, "chunks_fwd=2 kept")) << notes;
  }
}

// The planned knobs on the presets: the hybridep row's sizes per level; compression 1 / SR.
TEST(PlannedStrategy, HybridEpDomainAndCompressionComeFromTheEstimate) {
  struct Case {
    const char* model;
    const char* cluster;
  };
  for (Case c :
       {Case{"hybridep-gpt-medium", "hybridep-s"}, Case{"hybridep-gpt-medium", "hybridep-l"},
        Case{"monta-2x70b", ""}, Case{"netmoe-moe-gpt-s", ""}, Case{"lina-gpt2", ""}}) {
    const PlanInput in = preset_input(c.model, c.cluster);
    const ModelEstimates plan = estimate_strategies(in);
    const StrategyEstimate* e = row(plan, "hybridep");
    ASSERT_TRUE(e) << c.model;
    const std::vector<int> sizes = e->knobs.hybrid_levels;
    const core::Topology topo(in.cluster);
    const auto span = group_span(topo, core::build_rank_groups(in.parallel).ep.front());
    ASSERT_TRUE(span) << c.model;
    ASSERT_EQ(sizes.size(), span->counts.size()) << c.model;
    int expected = 1;
    for (int size : sizes) expected *= size;
    std::string notes;
    const Strategy s = planned("hybridep", in, &notes);
    EXPECT_EQ(s.hybrid_levels, sizes) << c.model << " " << sched::to_string(e->knobs);
    EXPECT_EQ(s.hybrid_domain, expected);
    EXPECT_EQ(in.parallel.ep % s.hybrid_domain, 0);
    sched::validate(s, "test");
    EXPECT_EQ(s.compression, e->knobs.compression);
    EXPECT_EQ(s.compression, 1.0);  // the uncompressed row: SR = 1
    EXPECT_TRUE(has(notes, "(hybrid_domain=" + std::to_string(expected) + ") from HybridEP"))
        << notes;
    // Compressed experts take the domains planned for SR compression.
    ASSERT_TRUE(row(plan, "hybridep-sr"));
    notes.clear();
    const Strategy sr = planned("base=hybridep,compression=0.02", in, &notes);
    EXPECT_EQ(sr.compression, 0.02);
    EXPECT_TRUE(has(notes, "hybridep-sr estimate")) << notes;
  }
}

TEST(PlannedStrategy, ExplicitKnobsSurvive) {
  const PlanInput in = preset_input("fsmoe-mixtral-22b");
  const ModelEstimates plan = estimate_strategies(in);
  std::string notes;
  Strategy s = planned("base=monta-o2,chunks_fwd=7", in, &notes);
  EXPECT_EQ(s.chunks_fwd, 7);
  EXPECT_EQ(s.chunks_bwd, row(plan, "monta-o2")->knobs.chunks_bwd);
  EXPECT_FALSE(has(notes, "chunks_fwd")) << notes;
  EXPECT_TRUE(has(notes, "chunks_bwd=")) << notes;

  const std::string all = "base=fsmoe,chunks=5,grad_partitions=9";
  notes.clear();
  EXPECT_EQ(planned(all, in, &notes), sched::parse_strategy(all, "test"));
  EXPECT_EQ(notes, "");
  s = planned("base=lina,grad_partitions=3,chunks_bwd=6", in);
  EXPECT_EQ(s.grad_partitions, 3);
  EXPECT_EQ(s.chunks_bwd, 6);
  s = planned("base=hybridep,hybrid_domain=1,compression=0.5", in);
  EXPECT_EQ(s.hybrid_domain, 1);
  EXPECT_EQ(s.compression, 0.5);
}

// What a build without NLopt refuses to plan for FSMoE (plan/step_service.cpp).
TEST(PlannedStrategy, OpenKnobsAreTheTunedOnesTheTextLeftUnset) {
  using Knobs = std::vector<std::string>;
  EXPECT_EQ(open_planned_knobs(parse_strategy_knobs("fsmoe", "test")),
            (Knobs{"chunks_fwd", "chunks_bwd", "grad_partitions"}));
  EXPECT_EQ(open_planned_knobs(parse_strategy_knobs("base=fsmoe,chunks_fwd=3", "test")),
            (Knobs{"chunks_bwd", "grad_partitions"}));
  EXPECT_EQ(
      open_planned_knobs(parse_strategy_knobs("base=fsmoe,chunks=5,grad_partitions=9", "test")),
      Knobs{});
  EXPECT_EQ(open_planned_knobs(parse_strategy_knobs("monta-o2", "test")),
            (Knobs{"chunks_fwd", "chunks_bwd"}));
  EXPECT_EQ(open_planned_knobs(parse_strategy_knobs("baseline", "test")), Knobs{});
}

// MoNTA needs expert sharding; the Lina testbed has esp = 1, so the planner skips it.
TEST(PlannedStrategy, SkippedMethodsKeepTheNamedDefaultsWithTheReason) {
  const PlanInput in = preset_input("lina-gpt2");
  const ModelEstimates plan = estimate_strategies(in);
  ASSERT_FALSE(row(plan, "monta-o2"));
  std::string notes;
  const Strategy s = planned("monta-o2", in, &notes);
  EXPECT_EQ(s, named_strategy("monta-o2"));
  EXPECT_TRUE(has(notes, "chunks_fwd=4 kept")) << notes;
  EXPECT_TRUE(has(notes, "skipped monta-o2")) << notes;
  EXPECT_TRUE(has(notes, "expert sharding")) << notes;
  EXPECT_EQ(std::count(notes.begin(), notes.end(), '\n'), 2);  // one line a knob
}

TEST(PlannedStrategy, MethodsWithoutTunedKnobsAreUnchanged) {
  // A parallel configuration the planner would refuse: nothing may run it.
  PlanInput bad = preset_input("fsmoe-mixtral-22b");
  bad.parallel.dp = 1;
  for (const char* text : {"baseline", "hier-a2a", "monta-o1", "netmoe", "a2a=2dh,chunks=3"}) {
    std::string notes;
    const auto parsed = parse_strategy_knobs(text, "test");
    EXPECT_EQ(planned_strategy(parsed, bad, &notes), parsed.strategy) << text;
    EXPECT_EQ(notes, "") << text;
  }
}

}  // namespace
}  // namespace moecomm::plan

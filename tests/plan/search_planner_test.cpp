#include "plan/search_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "plan/lina_planner.h"
#include "plan/planned_strategy.h"
#include "sched/layer_builder.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"
#include "support/expect_error.h"
#include "support/plan_inputs.h"

namespace moecomm::plan {
namespace {

using sched::Strategy;

// One training step of `s` on `parallel` as `moecomm sim` runs it; +inf when refused.
double simulate_step(const PlanInput& in, const Strategy& s, const core::ParallelConfig& parallel) {
  sched::LayerSetup setup;
  setup.model = in.model;
  setup.cluster = in.cluster;
  setup.parallel = parallel;
  setup.strategy = s;
  try {
    const sched::Schedule schedule = sched::build_training_step(setup);
    return sim::make_report(schedule, sim::simulate(schedule, core::Topology(in.cluster)))
        .iteration_s;
  } catch (const Error&) {
    return std::numeric_limits<double>::infinity();
  }
}

// What `moecomm sim --strategy NAME` simulates: the method's knobs planned, Lina packed.
double named_step(const PlanInput& in, const ModelEstimates& estimates, const std::string& name) {
  core::ParallelConfig parallel = in.parallel;
  if (name == "lina")
    if (auto packed = lina_packed_parallel(in, estimates)) parallel = *packed;
  PlanInput at = in;
  at.parallel = parallel;
  return simulate_step(
      in, planned_strategy(sched::parse_strategy_knobs(name, "test"), at, estimates), parallel);
}

SearchOptions converge() {
  SearchOptions o;
  o.budget_s = 1e6;
  return o;
}

TEST(SearchPlanner, EveryRowRerunsAsPricedFromItsStrategyString) {
  for (const char* model : {"lina-gpt2", "monta-2x70b", "fsmoe-mixtral-7b"}) {
    const PlanInput in = preset_input(model);
    const Plan plan = make_plan(in);
    for (const PlanRow& r : plan.rows) {
      const Strategy s = sched::parse_strategy(sched::to_string(r.candidate.strategy), "row");
      const core::ParallelConfig p = core::resolve_parallel(
          core::parse_parallel_spec(parallel_string(r.candidate.parallel), "row"),
          in.cluster.world_size(), in.model.experts, "row");
      EXPECT_EQ(s, r.candidate.strategy) << model << " " << r.name;
      EXPECT_DOUBLE_EQ(simulate_step(in, s, p), r.simulated.step_s) << model << " " << r.name;
    }
  }
}

// The grid: A2A algorithm x chunks x gradient sync (x TP dispatch where tokens are replicated).
double grid_best(const PlanInput& in) {
  double best = std::numeric_limits<double>::infinity();
  for (auto a2a : {sched::Algorithm::kFlat, sched::Algorithm::k2DH})
    for (int chunks : {1, 2, 4})
      for (auto sync :
           {sched::GradSync::kBucketed, sched::GradSync::kLina, sched::GradSync::kFsmoe})
        for (auto dispatch : {sched::TpDispatch::kReplicate, sched::TpDispatch::kDropAllGather}) {
          if (dispatch == sched::TpDispatch::kDropAllGather && in.parallel.esp == 1) continue;
          Strategy s;
          s.a2a = a2a;
          s.chunks_fwd = s.chunks_bwd = chunks;
          s.grad_sync = sync;
          s.grad_partitions = sync == sched::GradSync::kBucketed ? 1 : 4;
          s.tp_dispatch = dispatch;
          best = std::min(best, simulate_step(in, s, in.parallel));
        }
  return best;
}

// The recommendation; where no row fits the device's memory (monta-2x70b, netmoe-moe-gpt-xl
// and -xxl on their testbeds) there is none, and the search's best is the fastest row.
const PlanRow& searched_best(const Plan& plan) {
  if (!plan.recommended.empty()) return plan.row(plan.recommended);
  EXPECT_TRUE(plan.shortfall);
  return *std::min_element(plan.rows.begin(), plan.rows.end(), [](const auto& a, const auto& b) {
    return a.simulated.step_s < b.simulated.step_s;
  });
}

TEST(SearchPlanner, RecommendationIsWithinOnePercentOfTheGridsSimulatedBest) {
  for (const char* model : {"lina-gpt2", "monta-2x70b"}) {
    const PlanInput in = preset_input(model);
    const Plan plan = make_plan(in, converge());
    EXPECT_TRUE(plan.search.converged) << model;
    const double best = grid_best(in);
    ASSERT_TRUE(std::isfinite(best)) << model;
    EXPECT_LE(searched_best(plan).simulated.step_s, best * 1.01) << model;
  }
}

TEST(SearchPlanner, RecommendationIsNoWorseThanAnyNamedStrategyOnEveryPreset) {
  for (const auto& model : core::list_presets("models")) {
    if (!core::load_model(model).cluster) continue;  // presets with a testbed of their own
    const PlanInput in = preset_input(model);
    const Plan plan = make_plan(in, SearchOptions{1, 0, {}});  // the search only improves on it
    const double recommended = searched_best(plan).simulated.step_s;
    for (const auto& name : sched::strategy_names()) {
      if (name == "netmoe") continue;  // moves samples by routing; the plan routes uniformly
      EXPECT_LE(recommended, named_step(in, plan.estimates, name) * (1 + 1e-12))
          << model << " " << name;
    }
  }
}

TEST(SearchPlanner, LinaRowPacksExpertsAndSyncsTheirGradientsOverThePackedEdpGroup) {
  const PlanInput in = preset_input("lina-gpt2");  // 16 experts, ep = 16 on 16 GPUs
  const Plan plan = make_plan(in, SearchOptions{1, 0, {}});
  const PlanRow& lina = plan.row("lina");
  ASSERT_TRUE(lina.model);
  ASSERT_TRUE(lina.model->lina);
  const int packed_ep = lina.model->lina->ep_group;
  ASSERT_LT(packed_ep, in.parallel.ep);
  EXPECT_EQ(lina.candidate.parallel.ep, packed_ep);
  EXPECT_EQ(lina.candidate.parallel.edp, in.cluster.world_size() / packed_ep);
  // Lina Sec. 4.2 cuts the packed device's expert gradients (E / ep experts) and the dense
  // ones into micro-ops of the estimate's size; the knob takes the larger tensor's count.
  const auto& m = in.model;
  const double microop = lina.model->lina->microop_bytes;
  const double expert_bytes = double(m.experts) / packed_ep * m.expert_params() * m.dtype_bytes;
  const double dense_bytes =
      (4.0 * m.hidden * m.hidden + double(m.hidden) * m.experts) * m.dtype_bytes;
  const long long count = std::max(lina_partition(expert_bytes, microop).count,
                                   lina_partition(dense_bytes, microop).count);
  EXPECT_EQ(lina.candidate.strategy.grad_partitions, count);
  EXPECT_EQ(lina.candidate.strategy.grad_sync, sched::GradSync::kLina);
}

// MoNTA's cluster expansion: 8 nodes x 2 GPUs, cp = 2 < ep = 4, so MoNTA's rows lay CP out
// horizontally (orthogonal to EP); the search prices both layouts, and the simulated best
// wins whatever the rule said (here vertical: it keeps each CP pair inside a node).
TEST(SearchPlanner, MontaRowsTakeTheClusterExpansionRuleAndTheSearchPricesBothLayouts) {
  PlanInput in;
  in.cluster.name = "8x2";
  in.cluster.levels = {{"node", 8, 25e9, 5e-6}, {"gpu", 2, 200e9, 2e-6}};
  in.cluster.device = {312e12, 80e9, 2e12};
  in.model.name = "cp";
  in.model.hidden = 1024;
  in.model.ffn_hidden = 4096;
  in.model.experts = 4;
  in.model.top_k = 2;
  in.model.layers = 2;
  in.model.heads = 16;
  in.model.seq_len = 8192;
  in.model.micro_batch = 1;
  in.parallel =
      core::resolve_parallel(core::parse_parallel_spec("tp=1,cp=2,ep=4", "-"), 16, 4, "-");
  const Plan plan = make_plan(in, converge());
  const PlanRow& o1 = plan.row("monta-o1");
  EXPECT_EQ(o1.candidate.parallel.cp_layout, core::CpLayout::kHorizontal);
  ASSERT_EQ(o1.notes.size(), 2u);  // MoNTA's model needs esp > 1: no estimate here, said first
  EXPECT_EQ(o1.notes.front().rfind("no paper-model estimate: ", 0), 0u);
  EXPECT_EQ(o1.notes.back(), "cp_layout=horizontal by MoNTA's cluster expansion (cp=2 < ep=4)");
  EXPECT_EQ(plan.row("baseline").candidate.parallel.cp_layout, core::CpLayout::kVertical);
  core::ParallelConfig vertical = o1.candidate.parallel;
  vertical.cp_layout = core::CpLayout::kVertical;
  const double v = simulate_step(in, o1.candidate.strategy, vertical);
  EXPECT_LT(v, o1.simulated.step_s);  // the CP pairs cross nodes when horizontal
  EXPECT_LE(plan.row(plan.recommended).simulated.step_s, v);
}

TEST(SearchPlanner, BudgetZeroPricesTheMethodRowsOnly) {
  const PlanInput in = preset_input("lina-gpt2");
  const Plan plan = make_plan(in, SearchOptions{1, 0, {}});
  EXPECT_FALSE(plan.search.converged);
  for (const PlanRow& r : plan.rows) EXPECT_NE(r.name, "searched");
  const auto best = std::min_element(plan.rows.begin(), plan.rows.end(), [](auto& a, auto& b) {
    return a.simulated.step_s < b.simulated.step_s;
  });
  EXPECT_EQ(plan.recommended, best->name);
}

TEST(SearchPlanner, JsonHasTheDocumentedKeys) {
  const PlanInput in = preset_input("lina-gpt2");
  const nlohmann::json j = plan_to_json(make_plan(in, SearchOptions{1, 0, {}}), in);
  ASSERT_TRUE(j["strategies"].is_array());
  for (const auto& s : j["strategies"]) {
    for (const char* key : {"name", "forward_ms", "backward_ms", "total_ms", "memory_GB", "params",
                            "source", "strategy", "parallel", "model_estimate", "notes"})
      EXPECT_TRUE(s.contains(key)) << key;
  }
  EXPECT_TRUE(j["recommended"].is_string());
  EXPECT_TRUE(j["model_fastest"].is_string());
  for (const char* key : {"candidates", "refused", "wall_s", "converged"})
    EXPECT_TRUE(j["search"].contains(key)) << key;
}

TEST(SearchPlanner, Errors) {
  const PlanInput in = preset_input("lina-gpt2");
  EXPECT_ERROR_HAS(make_plan(in, SearchOptions{0, 0, {}}), "layers", "at least 1");
  EXPECT_ERROR_HAS(make_plan(in, SearchOptions{1, -1, {}}), "--budget-s", ">= 0");
  EXPECT_ERROR_HAS(make_plan(in, SearchOptions{1, std::nan(""), {}}), "--budget-s", "finite");
}

}  // namespace
}  // namespace moecomm::plan

#include "plan/estimate_params.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/presets.h"
#include "plan/estimates.h"
#include "support/estimate_rows.h"
#include "support/plan_inputs.h"

namespace moecomm::plan {
namespace {

using sched::named_strategy;

TEST(EstimateParams, KnobChangesAreTheKnobsThatDifferFromTheBaselineByTheirNames) {
  EXPECT_EQ(knob_changes(sched::Strategy{}), nlohmann::json::object());
  EXPECT_EQ(knob_changes(named_strategy("monta-o3")),
            (nlohmann::json{{"tp_dispatch", "drop-allgather"},
                            {"chunks_fwd", 4},
                            {"chunks_bwd", 4},
                            {"pipeline_experts", false},
                            {"copy_pipelining", true},
                            {"comm_priority", "monta"}}));
  const sched::Strategy hybrid =
      sched::parse_strategy("base=hybridep,hybrid_levels=2x1,compression=0.5", "test");
  EXPECT_EQ(knob_changes(hybrid),
            (nlohmann::json{
                {"expert_transfer", "hybrid"}, {"hybrid_levels", {2, 1}}, {"compression", 0.5}}));
}

// The params of `moecomm plan --json` carry the models' knob values under the knob names
// --strategy takes, the figures in ms.
TEST(EstimateParams, RowsNameTheirKnobsAsTheStrategyDoes) {
  const ModelEstimates p = estimate_strategies(preset_input("monta-2x70b"));
  const StrategyEstimate& o3 = estimate_row(p, "monta-o3");
  const nlohmann::json monta = estimate_params(o3);
  EXPECT_EQ(monta["chunks_fwd"], o3.knobs.chunks_fwd);
  EXPECT_EQ(monta["chunks_bwd"], o3.knobs.chunks_bwd);
  EXPECT_EQ(monta["copy_pipelining"], true);
  EXPECT_DOUBLE_EQ(monta["a2a_ms"].get<double>(), o3.a2a_s.value() * 1e3);
  EXPECT_DOUBLE_EQ(monta["mfu"].get<double>(), o3.monta->mfu);
  EXPECT_EQ(monta["monta_choice"], o3.monta->choice);
  EXPECT_FALSE(estimate_params(estimate_row(p, "monta-o1")).contains("monta_choice"));

  const StrategyEstimate& fsmoe = estimate_row(p, "fsmoe");
  const nlohmann::json f = estimate_params(fsmoe);
  EXPECT_EQ(f["chunks_fwd"], fsmoe.knobs.chunks_fwd);
  EXPECT_EQ(f["grad_sync"], "fsmoe");  // dp = 2: the backward degree comes from the partition
  EXPECT_DOUBLE_EQ(f["chunks_fwd_relaxed"].get<double>(), fsmoe.fsmoe->chunks_fwd_relaxed);

  const nlohmann::json sr = estimate_params(estimate_row(p, "hybridep-sr"));
  EXPECT_DOUBLE_EQ(sr["compression"].get<double>(), 1.0 / kHybridEpCompression);
  EXPECT_EQ(sr["hybrid_levels"], estimate_row(p, "hybridep-sr").knobs.hybrid_levels);
  EXPECT_FALSE(
      estimate_params(estimate_row(p, "hybridep")).contains("compression"));  // SR 1: baseline's

  for (const auto& e : p.strategies)
    for (const char* old : {"r_forward", "r_backward", "chunks", "copy_pipelined", "domain_sizes"})
      EXPECT_FALSE(estimate_params(e).contains(old)) << e.name << " " << old;
}

// Every row's knobs are a strategy sched accepts once MoNTA's N is within the schedule's
// bounds (planned_strategy clamps it).
TEST(EstimateParams, EveryRowsKnobsValidate) {
  for (const auto& name : core::list_presets("models")) {
    const ModelEstimates p = estimate_strategies(preset_input(name));
    for (const auto& e : p.strategies) {
      sched::Strategy s = e.knobs;
      EXPECT_EQ(s.name, e.name);
      s.chunks_fwd = std::min(s.chunks_fwd, sched::kMaxChunks);
      s.chunks_bwd = std::min(s.chunks_bwd, sched::kMaxChunks);
      EXPECT_NO_THROW(sched::validate(s, name + " " + e.name));
    }
  }
}

}  // namespace
}  // namespace moecomm::plan

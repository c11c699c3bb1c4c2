#pragma once
// `moecomm plan --search-layout`: which parallel layout (tp, cp, pp, dp for the dense part; esp,
// ep, edp for the MoE part; the micro-batch count M; the pipeline schedule) trains a model
// fastest on a cluster. Every layout is enumerated; those whose heaviest pipeline stage does not
// fit the device's memory (device_memory, strategy_table.h) are dropped; the rest are ranked by
// an analytical pre-estimate, MoNTA's link priority breaking near-ties; the best are priced by
// the knob search (search_planner.h) on a reduced simulation (see price_layout in the .cpp and
// kLayoutPricing) within a wall-clock budget.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"
#include "plan/search_planner.h"
#include "plan/strategy_table.h"
#include "sched/strategy.h"

namespace moecomm::plan {

inline constexpr double kDefaultLayoutBudgetS = 45;
inline constexpr int kDefaultMaxLayouts = 12;

// What the search simulates and how it scales it up (--help, README and the JSON say it).
inline constexpr const char* kLayoutPricing =
    "per layout, one pipeline stage is simulated alone: its world / pp ranks on the part of the "
    "cluster they occupy, pp = 1, one MoE block, one micro-batch, every method row and the knob "
    "search from them (as plain `plan`); the fastest row whose whole-layout memory fits gives the "
    "block's forward + backward time t_b and its exposed gradient-sync tail. Scaled by the "
    "pipeline formula (Narayanan et al. 2021, Sec. 2.2): stage time t_s = MoE blocks x t_b + dense "
    "blocks x t_b x (dense block flops / MoE block flops) + the LM head's 6 b s h V / (tp cp) "
    "flops "
    "on the last stage at the device's efficiency; step = (M + pp - 1) t_max for 1f1b, (M + "
    "(pp - 1) / V) t_max for interleaved:V, + 2 (pp - 1) stage hand-offs (b s h / cp activations "
    "over the link between stages, the device's share of it) + the gradient sync left exposed "
    "(the tail of one block, or all the stage's blocks' syncs less the last micro-batch's "
    "backward, whichever is longer)";

inline constexpr const char* kMfuFormula =
    "MFU = model flops per step / (step time x world x the device's peak for the compute dtype); "
    "model flops = tokens x (6 x active params (routed top_k experts, shared experts, dense "
    "layers, embedding and LM head) + 12 x layers x hidden x seq_len) (Narayanan et al. 2021, "
    "Eq. 3; PaLM, Chowdhery et al. 2022, App. B)";

struct Layout {
  core::ParallelConfig parallel;
  std::int64_t micro_batches = 1;  // M = global batch / (dp x micro_batch)
  sched::Strategy pipeline;        // pp_schedule and virtual_stages
};

// "tp=2,cp=1,pp=2,dp=4,ep=8,esp=1,edp=1".
std::string layout_string(const core::ParallelConfig& parallel);

// Every parallel configuration of `model` on `cluster` (core::ParallelConfig's rules: tp x cp x
// dp x pp = world = esp x ep x edp x pp): tp and esp inside a node (they divide its devices),
// tp dividing the heads and key/value heads, cp the sequence, esp the expert FFN, ep the
// experts, pp at most the layers. cp_layout vertical.
std::vector<core::ParallelConfig> enumerate_parallel(const core::ModelConfig& model,
                                                     const core::Cluster& cluster);

// The layouts of those configurations for `global_batch` sequences per step: dp must divide
// global_batch / micro_batch (M = the quotient / dp); pp_schedule 1f1b, and interleaved:V for
// every V >= 2 with M a multiple of pp and pp x V <= layers (pp > 1). Throws moecomm::Error
// unless global_batch is a positive multiple of the model's micro_batch.
std::vector<Layout> enumerate_layouts(const core::ModelConfig& model, const core::Cluster& cluster,
                                      std::int64_t global_batch);

struct LayoutSearchOptions {
  std::int64_t global_batch = 0;  // sequences per step
  double budget_s = kDefaultLayoutBudgetS;
  int max_layouts = kDefaultMaxLayouts;  // parallel configurations whose knob search is simulated
  std::function<void(const std::string&)> progress;
};

struct LayoutRow {
  Layout layout;
  MemoryBreakdown memory;  // with the chosen knobs
  double estimate_s = 0;   // the analytical pre-estimate of the step
  sched::Strategy knobs;   // the chosen knobs
  double block_s = 0;      // the simulated MoE block, one micro-batch, forward + backward
  double stage_s = 0;      // the heaviest stage, one micro-batch
  double hop_s = 0;        // one stage hand-off
  double sync_s = 0;       // gradient sync left exposed
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
};

struct LayoutSearch {
  // One per simulated parallel layout (its fastest schedule), fastest first; the first is the
  // recommendation.
  std::vector<LayoutRow> rows;
  int enumerated = 0;   // layouts (parallel sizes x schedules)
  int fitting = 0;      // of which fit memory
  int simulated = 0;    // parallel configurations whose knob search ran
  int simulations = 0;  // simulated candidates in all
  int refused = 0;      // configurations no method's schedule builds on
  double budget_s = 0;
  double wall_s = 0;
  int unsimulated = 0;        // fitting configurations left unsimulated (max_layouts, budget)
  bool budget_spent = false;  // the budget ran out before max_layouts were simulated
  std::optional<Shortfall> shortfall;  // set when no layout fits
};

// `input` gives the model, cluster, zero and recompute (its parallel is not used). Throws
// moecomm::Error on a bad batch or budget.
LayoutSearch search_layouts(const PlanInput& input, const LayoutSearchOptions& options);

// The ranks of one pipeline stage as a cluster of their own: `ranks` consecutive devices.
core::Cluster stage_cluster(const core::Cluster& cluster, int ranks);

// {model, cluster, world, global_batch, pricing, mfu_formula, enumerated, fitting, simulated,
// simulations, unsimulated, refused, budget_s, wall_s, budget_spent, recommended (null when none),
// shortfall, layouts: [{layout, parallel, micro_batches, pp_schedule, strategy, step_ms,
// tokens_per_s, mfu, memory_GB, memory: {...}, estimate_ms, block_ms, stage_ms, hop_ms, sync_ms}]}.
nlohmann::json layout_search_to_json(const LayoutSearch& search, const PlanInput& input,
                                     std::int64_t global_batch);

}  // namespace moecomm::plan

#pragma once
// The `moecomm plan` table: every candidate strategy of the five papers, estimated for one
// MoE layer of a model on a cluster under a parallel configuration, and the recommendation.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"
#include "plan/fsmoe_pipeline.h"
#include "sched/strategy.h"

namespace moecomm::plan {

// The whole layout a memory estimate counts, where it is not the one simulated: plan's layout
// search prices one pipeline stage alone (pp = 1, one micro-batch, MoE blocks only).
struct WholeLayout {
  core::ModelConfig model;        // with its dense layers and micro_batches
  core::ParallelConfig parallel;  // with its pp
  sched::Strategy pipeline;       // its pp_schedule and virtual_stages
};

struct PlanInput {
  core::ModelConfig model;
  core::Cluster cluster;
  core::ParallelConfig parallel;
  // The knob `zero` (sched::Strategy::zero) every candidate of the plan carries: the ZeRO stage
  // of the model states (MoNTA Table 3).
  int zero = 1;
  std::string recompute = "selective";  // activation recomputation: none | selective | full
  // Start-up time of one GEMM launch (FSMoE Fig. 5(a): alpha_gemm = 4.26e-2 ms on A6000);
  // it is what keeps pipelining degrees finite.
  double gemm_startup_s = 4.26e-5;
  std::optional<WholeLayout> whole;  // nullopt: the memory is model's on parallel
};

// Tutel's 2DH split of the EP group, as the hier-a2a row prices it and the schedule runs it
// (a node: the innermost level's worker, e.g. the GPUs of one machine). Absent when the nodes
// hold unequal numbers of EP ranks (the A2A then runs flat).
struct HierarchicalSplit {
  int nodes = 0;           // nodes the EP group spans (the inter-node A2A's size; 1: flat)
  int ranks_per_node = 0;  // EP ranks on each of them (the intra-node A2A's size)
};

// What MoNTA's model reports beside its N (Eq. 8-11, Algorithms 1-2, Fig. 10).
struct MontaFigures {
  double baseline_a2a_s = 0;   // MoNTA's own price of the baseline A2A
  double i_minimal_bytes = 0;  // Algorithm 1's I_minimal: the smallest chunk worth sending
  // Fig. 10's performance outputs: one micro-batch through every layer of a pipeline stage.
  double latency_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  // O2 and O3: the variant MoNTA's cost comparison selects, by strategy_name (monta_planner.h);
  // empty for O1.
  std::string choice;
};

struct FsmoeFigures {
  FsmoeCase case_forward = FsmoeCase::k1;  // Sec. 4's case the forward optimum falls in
  double chunks_fwd_relaxed = 0;           // the forward degree r of the relaxed problem (SLSQP)
};

// Lina Sec. 4.2. grad_partitions is not the estimate's: planned_strategy cuts the layer's
// gradients into micro-ops of microop_bytes, as the estimate does.
struct LinaFigures {
  double microop_bytes = 0;    // one AllReduce micro-op
  int experts_per_device = 0;  // expert packing
  int ep_group = 0;            // the EP size the packed A2A runs over
  double a2a_blocked_s = 0;    // backward time the expert compute waits on the A2As
};

struct HybridEpFigures {
  // Per level, Definition 1's p: the share of a worker's outgoing chunks that stay A2A (the
  // rest travel as experts).
  std::vector<double> p;
  double allgather_s = 0;                        // the forward's expert AllGather
  long long a2a_pairs = 0, allgather_pairs = 0;  // Algorithm 1's transfers by kind
  std::vector<int> paper_eq8_hybrid_levels;      // Eq. 8's domain sizes, beside the best found
};

struct StrategyEstimate {
  std::string name;      // "baseline", "hier-a2a", "monta-o2", ...
  std::string source;    // the paper and section the estimate follows
  double forward_s = 0;  // one MoE layer, one micro-batch
  double backward_s = 0;
  double memory_bytes = 0;  // per device
  // The knob values the row's model decides (MoNTA's N as chunks_fwd and chunks_bwd, FSMoE's r
  // per phase, HybridEP's domain sizes and 1 / SR, ...), set over the baseline strategy; the
  // knobs it does not decide keep the baseline's values. MoNTA's N may exceed
  // sched::kMaxChunks: planned_strategy clamps it to a schedule that builds.
  sched::Strategy knobs;
  std::optional<double> a2a_s;  // one A2A of the layer as the model prices it (not FSMoE's)
  std::optional<HierarchicalSplit> hierarchical;
  std::optional<MontaFigures> monta;
  std::optional<FsmoeFigures> fsmoe;
  std::optional<LinaFigures> lina;
  std::optional<HybridEpFigures> hybridep;
  double total_s() const { return forward_s + backward_s; }
};

struct SkippedStrategy {
  std::string name;
  std::string reason;
};

// The papers' analytical models, one row per method: the seeds of the search planner
// (search_planner.h) and the estimate `moecomm plan` prints beside each simulated row.
struct ModelEstimates {
  std::vector<StrategyEstimate> strategies;
  std::vector<SkippedStrategy> skipped;  // candidates whose model does not apply here
  std::string fastest;                   // the row the models rank first
  nlohmann::json workload;               // derived quantities the estimates share (bytes, times)
};

ModelEstimates estimate_strategies(const PlanInput& input);
// The baseline row alone (estimate_strategies' first), cheap enough to rank many layouts.
StrategyEstimate estimate_baseline_layer(const PlanInput& input);

// Per device on the pipeline stage that needs the most, by kind.
struct MemoryBreakdown {
  double weights = 0;           // fp16/bf16 weights
  double gradients = 0;         // their gradients
  double optimizer_states = 0;  // fp32 master weights, momentum and variance
  double activations = 0;       // the micro-batches in flight at the stage's peak
  int stage = 0;                // which pipeline stage
  double total() const { return weights + gradients + optimizer_states + activations; }
};

// MoNTA Eq. 1 per pipeline stage, the largest: model states (Table 3, ZeRO stage knobs.zero)
// of the stage's layers (sched::split_layers over pp x V parts; dense layers, shared experts,
// grouped-query attention; the embedding on the first stage, the LM head on the last), plus
// activations (Table 4) of the micro-batches the stage holds at its peak under
// knobs.pp_schedule, found by walking sched::pipeline_order (1F1B: min(pp - s, M), gpipe: M,
// interleaved: Megatron's warm-up). knobs.recompute_experts drops the experts' inner
// activations. Uses input.whole when set. Throws moecomm::Error (bad sizes or schedule).
MemoryBreakdown device_memory(const PlanInput& input, const sched::Strategy& knobs);
double memory_per_device(const PlanInput& input, const sched::Strategy& knobs);
// The estimates' memory: knobs zero = input.zero, 1F1B, recompute_experts as given.
double memory_per_device(const PlanInput& input, bool recompute_experts);

}  // namespace moecomm::plan

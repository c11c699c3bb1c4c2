#pragma once
// The `moecomm plan` table: every candidate strategy of the five papers, estimated for one
// MoE layer of a model on a cluster under a parallel configuration, and the recommendation.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"

namespace moecomm::plan {

struct PlanInput {
  core::ModelConfig model;
  core::Cluster cluster;
  core::ParallelConfig parallel;
  int zero_stage = 1;                   // ZeRO stage of the optimizer state (MoNTA Table 3)
  std::string recompute = "selective";  // activation recomputation: none | selective | full
  // Start-up time of one GEMM launch (FSMoE Fig. 5(a): alpha_gemm = 4.26e-2 ms on A6000);
  // it is what keeps pipelining degrees finite.
  double gemm_startup_s = 4.26e-5;
};

struct StrategyEstimate {
  std::string name;      // "baseline", "hier-a2a", "monta-o2", ...
  std::string source;    // the paper and section the estimate follows
  double forward_s = 0;  // one MoE layer, one micro-batch
  double backward_s = 0;
  double memory_bytes = 0;                           // per device
  nlohmann::json params = nlohmann::json::object();  // the strategy's knob values
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
// MoNTA Eq. 1 for `input`'s model and parallel sizes: model states and activations per device.
double memory_per_device(const PlanInput& input);

}  // namespace moecomm::plan
